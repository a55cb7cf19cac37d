"""How a draft starts: its shape, the K tokens its head scores, and its first weights (fresh from the
target's embedding, cut from the target's own layers, or, in the CLI, a shipped draft's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.train.draft.data import CorpusData

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from specviz.models.draft import ReducedVocabDraft


@dataclass(frozen=True)
class DraftShape:
    hidden: int = 384  # residual width d
    layers: int = 6  # decoder layers
    heads: int = 6  # attention heads (head_dim = hidden / heads)
    kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate: int = 1024  # SwiGLU MLP width
    head_vocab: int = 8192  # K: tokens the head scores (the most frequent answer tokens)
    embed_rank: int = 128  # r: width of the factorised input table E [V, r]


def new_draft(target: PreTrainedModel, shape: DraftShape, vocab_ids: torch.Tensor, seed: int) -> ReducedVocabDraft:
    """A fresh draft whose input table is the target's embedding on its top `embed_rank` principal
    axes and whose head starts as the same projection (to width d) of its K tokens' embeddings."""
    from specviz.models.draft import ReducedVocabDraft, reduced_config

    config = reduced_config(target.config, **asdict(shape))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        draft = ReducedVocabDraft(config, vocab_ids).float()
    # (get_input_embeddings() is typed as an nn.Module, whose `.weight` mypy reads as Tensor | Module)
    e = target.get_input_embeddings().weight.detach().float().cpu()  # type: ignore[operator]  # [V, H_target]
    centred = e - e.mean(dim=0)
    _, _, axes = torch.linalg.svd(centred, full_matrices=False)  # axes: [H_target, H_target]
    with torch.no_grad():
        r = min(shape.embed_rank, axes.shape[0])
        table = centred @ axes[:r].T  # [V, r]
        draft.model.embed_tokens.table.weight.zero_()[:, :r] = table / table.norm(dim=1).mean()
        d = min(shape.hidden, axes.shape[0])
        head = centred[vocab_ids] @ axes[:d].T  # [K, d]
        draft.lm_head.proj.weight.zero_()[:, :d] = head / head.norm(dim=1).mean()
    return draft


def subclone_draft(
    target: PreTrainedModel, layers: list[int], vocab_ids: torch.Tensor, embed_rank: int
) -> ReducedVocabDraft:
    """A draft cut from the target itself (weight subcloning): the target's width, heads and MLP,
    its decoder layers `layers` and final norm copied, its head's rows for the K tokens, and its
    input embedding as the best rank-r factorisation (truncated SVD)."""
    from specviz.models.draft import ReducedVocabDraft, reduced_config

    t = target.config
    config = reduced_config(
        t,
        hidden=t.hidden_size,
        layers=len(layers),
        heads=t.num_attention_heads,
        kv_heads=t.num_key_value_heads,
        intermediate=t.intermediate_size,
        head_vocab=len(vocab_ids),
        embed_rank=embed_rank,
    )
    draft = ReducedVocabDraft(config, vocab_ids).float()
    state = target.state_dict()
    copied = {
        f"model.layers.{i}.{k.split('.', 3)[3]}": v
        for i, src in enumerate(layers)
        for k, v in state.items()
        if k.startswith(f"model.layers.{src}.")
    }
    e = target.get_input_embeddings().weight.detach().float().cpu()  # type: ignore[operator]  # [V, d] (as above)
    u, s, vh = torch.linalg.svd(e, full_matrices=False)
    copied |= {
        "model.norm.weight": state["model.norm.weight"],
        "lm_head.proj.weight": target.get_output_embeddings().weight.detach()[vocab_ids],
        "model.embed_tokens.table.weight": u[:, :embed_rank] * s[:embed_rank],  # [V, r]
        "model.embed_tokens.up.weight": vh[:embed_rank].T,  # [d, r]
    }
    missing, unexpected = draft.load_state_dict(copied, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.vocab_ids"]:
        raise SpecvizError(f"the target's weights do not fit a subcloned draft: {missing[:3]} {unexpected[:3]}")
    return draft


def choose_vocab(data: CorpusData, vocab: int, k: int, eos: tuple[int, ...]) -> torch.Tensor:
    """The K most frequent answer tokens of the training split (EOS always among them), sorted."""
    counts = data.token_counts(vocab)
    counts[list(eos)] = counts.max() + 1
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[: min(k, vocab)])).long()


def coverage(data: CorpusData, vocab_ids: torch.Tensor, vocab: int) -> float:
    """Share of the held-out answer tokens that the head can propose."""
    inside = np.zeros(vocab, bool)
    inside[vocab_ids.numpy()] = True
    toks = np.concatenate([np.asarray(e.ids[e.answer_start :]) for e in data.val]) if data.val else np.zeros(0, int)
    return float(inside[toks].mean()) if len(toks) else float("nan")
