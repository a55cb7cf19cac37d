"""The online learner (OSD Algorithm 1): serve with one copy of the draft, distil into another.

Every request fills a buffer R (`RequestBuffer`) with the target's distributions where the draft
was wrong; R joins the replay buffer Q; every I requests the trainee copy takes a few optimiser
steps on Q with a distillation loss, Q is cleared, and the trainee's weights are copied into the
serving copy. The copy happens only between requests, so every request is served by one draft from
start to finish, and the output is the target's whatever the draft learns (verification decides).
With `background=True` the update runs in a worker thread off the request path; its weights are
swapped in at the start of the first request after it finishes. A server bounds how many learners
hold weights of their own by giving each its pool (`specviz.serving.pools`); the library's have none.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specviz.errors import SpecvizError
from specviz.models.devices import input_embeddings
from specviz.osd.buffers import POSITIONS, ReplayBuffer, RequestBuffer, Sample
from specviz.osd.losses import LOSSES, distillation_loss

if TYPE_CHECKING:
    from collections.abc import Iterable

    from transformers import PreTrainedModel

    from specviz.models.pair import ModelPair

OPTIMIZERS = ("adamw", "sgd")


@dataclass(frozen=True)
class OsdConfig:
    update_interval: int = 8  # I: requests served between two draft updates (the paper's default 8)
    loss: str = "fkl"  # fkl: KL(p||q) | rkl: KL(q||p) | jsd: JSD[beta]  (p: target, q: draft)
    beta: float = 0.5  # JSD's mixing weight
    temperature: float = 1.0  # both distributions softened by this before the loss
    positions: str = "wrong"  # wrong: where the draft was rejected (the paper) | all: every verified position
    top_k: int = 64  # keep the target's top-k log-probs per position (0: the full distribution)
    buffer_cap: int = 4096  # Q holds at most this many recorded positions (oldest requests evicted)
    steps: int = 8  # optimiser steps per update
    batch_requests: int = 8  # requests drawn from Q for each step
    optimizer: str = "adamw"  # adamw | sgd
    # learning rate: 3e-4 lifted a weak draft's acceptance by 0.10 and cost the distilled v2 draft 0.12;
    # at 3e-5 the v2 draft keeps its acceptance (benchmarks/osd)
    lr: float = 3e-5
    background: bool = False  # train in a worker thread (off the request path) instead of between requests
    seed: int = 0  # batch sampling

    def __post_init__(self) -> None:
        checks = [
            (self.update_interval >= 1, "update_interval must be at least 1"),
            (self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)}"),
            (0 < self.beta < 1, "beta must be in (0, 1)"),
            (self.temperature > 0, "temperature must be positive"),
            (self.positions in POSITIONS, f"positions must be one of {', '.join(POSITIONS)}"),
            (self.top_k >= 0, "top_k must be 0 (full distribution) or positive"),
            (
                self.buffer_cap >= 1 and self.steps >= 1 and self.batch_requests >= 1,
                "buffer_cap, steps and batch_requests must be positive",
            ),
            (self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}"),
            (self.lr > 0, "lr must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise SpecvizError(f"OSD: {message}")


class OnlineLearner:
    """One adapting draft: a serving copy, a trainee copy, the replay buffer Q and the update history."""

    def __init__(self, draft: PreTrainedModel, config: OsdConfig | None = None, pool: Any = None) -> None:
        self.config = config or OsdConfig()
        # what bounds the learners holding weights of their own (hold(self) / drop(self): the server's
        # AdaptedDrafts, which may `release` this one); None: unbounded, as in the library
        self.pool = pool
        # Copies on write: until its first update a learner serves the pair's own draft (read only)
        # and holds no trainee, so a visitor who never learns costs no memory (a draft copy, its
        # float32 trainee and Adam's two moments would be ~4x the draft's size).
        self._draft = draft
        self.serving = draft  # drafts; changes only between requests, and then it is this learner's own copy
        self._trainee: PreTrainedModel | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self.replay = ReplayBuffer(self.config.buffer_cap)
        self.rng = random.Random(self.config.seed)
        self.requests = 0  # requests served
        self.version = 0  # updates swapped into the serving copy
        self.updates: list[dict[str, Any]] = []  # one plain dict per finished update
        self._last_update_at = 0  # self.requests when the last update started
        self._worker: threading.Thread | None = None
        self._pending: dict[str, Any] | None = None  # a finished update not yet swapped in
        self.releases = 0  # times its pool took this learner's weights back

    @property
    def adapted(self) -> bool:
        """Whether this learner holds weights of its own (a serving copy or a trainee)."""
        return self.serving is not self._draft or self._trainee is not None

    @property
    def trainee(self) -> PreTrainedModel:
        """The copy that learns (float32, no dropout: eval mode), made when first needed."""
        if self._trainee is None:
            self._trainee = copy.deepcopy(self._draft).float().eval().requires_grad_(True)
            self._optimizer = _optimizer(self.config, self._trainee.parameters())
            self._hold()
        return self._trainee

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The trainee's optimiser (made with it)."""
        _ = self.trainee  # made with the optimiser
        assert self._optimizer is not None
        return self._optimizer

    def _own_serving(self) -> PreTrainedModel:
        """The serving draft, copied from the pair's before this learner first changes it."""
        if self.serving is self._draft:
            self.serving = copy.deepcopy(self._draft).eval().requires_grad_(False)
            self._hold()
        return self.serving

    def release(self) -> None:
        """Give back this learner's own weights (draft copy, trainee, optimiser): it serves the pair's
        draft again and learns from there. Its replay buffer and update history stay."""
        if self._worker is not None:
            self._worker.join()
        self._worker = self._pending = (
            None  # an update not served yet goes with the weights (no swap: it would hold them again)
        )
        self.serving, self._trainee, self._optimizer = self._draft, None, None
        self.version = 0
        self.releases += 1
        if self.pool is not None:
            self.pool.drop(self)

    def _hold(self) -> None:
        """Tell the pool that this learner holds (or keeps using) weights of its own."""
        if self.pool is not None:
            self.pool.hold(self)

    # -- serving ---------------------------------------------------------------------------------
    def begin_request(self) -> PreTrainedModel:
        """The draft for the next request (a finished background update is swapped in first)."""
        if self._worker is not None and not self._worker.is_alive():
            self._swap()
        if self.adapted:
            self._hold()  # the most recently used: the last to give its weights back
        return self.serving

    def request_buffer(self) -> RequestBuffer:
        """R for one request; pass it to the speculative loop as its `updater`."""
        return RequestBuffer(self.config.positions, self.config.top_k)

    def end_request(self, buffer: RequestBuffer, ids: list[int]) -> None:
        """R joins Q; every I requests the draft is updated on Q."""
        sample = buffer.finish(ids)
        if sample is not None:
            self.replay.add(sample)
        self.requests += 1
        due = self.requests - self._last_update_at >= self.config.update_interval
        if due and len(self.replay) and not self.busy:
            self.update()

    @property
    def busy(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    # -- learning ----------------------------------------------------------------------------------
    def update(self) -> None:
        """Distil Q into the trainee, then (now, or at the next request when in the background) serve it.
        Autograd is on for the training whatever mode the request runs in (the app steps runs in
        torch.inference_mode, and the update comes at the end of a request)."""
        self.wait()
        samples = self.replay.take()
        self._last_update_at = self.requests
        if self.config.background:
            self._worker = threading.Thread(target=self._train, args=(samples,), daemon=True)
            self._worker.start()
        else:
            with torch.inference_mode(False), torch.enable_grad():
                self._train(samples)
            self._swap()

    def wait(self) -> None:
        """Finish a running background update and serve its weights."""
        if self._worker is not None:
            self._worker.join()
            self._swap()

    def _train(self, samples: list[Sample]) -> None:
        cfg, t0 = self.config, time.perf_counter()
        losses = []
        for _ in range(cfg.steps):
            batch = self.rng.sample(samples, min(cfg.batch_requests, len(samples)))
            total = sum(len(s) for s in batch)
            self.optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for s in batch:  # one sequence at a time: no padding, logits only at the recorded positions
                loss = self.sample_loss(s) * (len(s) / total)
                loss.backward()
                step_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(self.trainee.parameters(), 1.0)
            self.optimizer.step()
            losses.append(step_loss)
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are a trainee's size: not kept between updates
        self._pending = {
            "request": self.requests,
            "samples": len(samples),
            "positions": sum(len(s) for s in samples),
            "buffer_bytes": sum(s.nbytes for s in samples),  # Q's memory when the update began
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "ms": (time.perf_counter() - t0) * 1e3,
        }

    def sample_loss(self, s: Sample, model: PreTrainedModel | None = None) -> torch.Tensor:
        """The distillation loss of `model` (default: the trainee) at one request's recorded positions."""
        model = model or self.trainee
        device = input_embeddings(model).device
        ids = torch.tensor(
            [s.ids[: max(s.positions)]], device=device
        )  # [1, L]: inputs up to the last recorded position
        keep = torch.tensor([j - 1 for j in s.positions], device=device)  # row j-1 predicts token j
        logits = model(input_ids=ids, logits_to_keep=keep).logits[0]  # [N, V_draft]
        log_p = s.target.full().to(device)  # [N, V]
        width = min(log_p.shape[-1], logits.shape[-1])  # tokens both vocabularies hold
        log_p, logits = log_p[:, :width], logits[:, :width]
        support = getattr(model.get_output_embeddings(), "vocab_ids", None)  # a reduced head scores only these
        if support is not None:  # p renormalised on them: KL to a q that is 0 elsewhere would be infinite
            log_p, logits = log_p[:, support], logits[:, support]
        cfg = self.config
        return distillation_loss(log_p, logits, cfg.loss, cfg.temperature, cfg.beta)

    def _swap(self) -> None:
        self._worker = None
        if self._pending is None:
            return
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: the next swap writes into them
            self._own_serving().load_state_dict(self.trainee.state_dict())  # cast to the serving dtype
        self.version += 1
        self.updates.append({**self._pending, "version": self.version, "swapped_at_request": self.requests})
        self._pending = None

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """The serving draft's weights as safetensors (load with `load`, or `load_adapted_draft`)."""
        from safetensors.torch import save_model

        self.wait()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "version": str(self.version),
            "requests": str(self.requests),
            **{k: str(v) for k, v in asdict(self.config).items()},
        }
        save_model(self.serving, str(path), metadata=meta)
        return path

    def load(self, path: str | Path) -> None:
        """Weights saved by `save` into both copies (the optimiser state starts afresh)."""
        from safetensors.torch import load_model

        self.wait()
        load_model(self._own_serving(), str(path))
        with torch.no_grad():
            self.trainee.load_state_dict(self.serving.state_dict())
        self._optimizer = _optimizer(self.config, self.trainee.parameters())


def load_adapted_draft(pair: ModelPair, path: str | Path) -> Any:
    """The pair with its draft replaced by weights an `OnlineLearner` saved."""
    from safetensors.torch import load_model

    if pair.draft is None:
        raise SpecvizError(f"the pair '{pair.name}' has no draft to load adapted weights into")
    draft = copy.deepcopy(pair.draft)
    load_model(draft, str(path))
    return pair.with_draft(draft, name=f"{pair.name}+osd")


def _optimizer(cfg: OsdConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
