"""run(method, pair, prompt, **options) -> Iterator[IterationRecord]: the engine's front door."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.limits import MAX_SEED, check_count, check_number, check_temperature
from specviz.methods import get_method
from specviz.metrics import summarize
from specviz.models.pair import ModelPair, check_pair, encode_prompt
from specviz.oracle import fill_oracle_sl
from specviz.records import IterationRecord, RunSummary
from specviz.sampling import SamplingConfig


class Submitter(Protocol):
    """What runs a method's side work: a ThreadPoolExecutor, or the app's models thread (serving.threads.Worker)."""

    def submit(self, fn: Any, /, *args: Any) -> Future: ...


def run(
    method: str,
    pair: ModelPair,
    prompt: str | Sequence[int],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    chat: bool | None = None,
    session: Any = None,
    executor: Submitter | None = None,
    preview: Callable[[Sequence[int]], None] | None = None,
    **options: Any,
) -> Iterator[IterationRecord]:
    """Decode `prompt` with `method`, yielding one record per speculative iteration.

    Every argument is checked here, before the first step, so a bad input fails at once with a
    `SpecvizError`. `options` are the method's own (e.g. speculation_length for vanilla).
    `chat`: apply the chat template to a text prompt (default: when the pair is a chat model).
    `session`: the state a stateful method carries across a series of runs (made once per series
    with `specviz.methods.new_session`: OSD's online learner); None: a lone run, which learns nothing.
    `executor`: where a method runs its second lane (PEARL's target), e.g. a thread kept across runs
    so that no run pays a new thread's first calls; None: the method starts one for the run.
    `preview(tokens)`: called with each piece of output a method emits before it can record it (a
    speculative vLLM row's tokens, whose per-step counts arrive with its last one); the records follow.
    """
    spec, opts, prompt_ids, sampling, max_new_tokens, seed = _checked(
        method,
        pair,
        prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        chat=chat,
        session=session,
        executor=executor,
        **options,
    )
    dec = Decoding(
        pair, prompt_ids, spec.name, max_new_tokens, sampling, seed, session=session, executor=executor, preview=preview
    )
    return spec.generate(dec, opts)


def check_run(method: str, pair: ModelPair, prompt: str | Sequence[int], **kwargs: Any) -> None:
    """Every check `run` makes (same arguments), touching no model's weights: where the models do
    not run (the app's process on a ZeroGPU Space), a bad input still fails before anything runs."""
    _checked(method, pair, prompt, **kwargs)


def _checked(
    method: str,
    pair: ModelPair,
    prompt: str | Sequence[int],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    chat: bool | None = None,
    session: Any = None,
    executor: Submitter | None = None,
    **options: Any,
) -> tuple:
    spec = get_method(method)
    opts = spec.make_options(**options)
    check_pair(pair)
    if session is not None and spec.session is None:
        raise SpecvizError(f"method '{spec.name}' carries nothing from one run to the next: give it no session")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise SpecvizError(
            "executor must be what runs a second lane, with submit(fn, *args) -> Future (a ThreadPoolExecutor), "
            f"got {type(executor).__name__}"
        )
    if spec.needs_draft and pair.draft is None:
        raise SpecvizError(f"method '{method}' needs a draft model, and the pair '{pair.name}' has none")
    max_new_tokens = check_count("max_new_tokens", max_new_tokens, most=pair.max_context)
    sampling = SamplingConfig(
        temperature=check_temperature(temperature),
        top_k=check_count("top_k (0: off)", top_k, most=pair.vocab_size, least=0),
        top_p=check_number("top_p", top_p, 0.0, 1.0),
    )
    seed = check_count("seed", seed, most=MAX_SEED, least=0)
    prompt_ids = encode_prompt(pair, prompt, chat)
    if len(prompt_ids) + max_new_tokens > pair.max_context:
        raise SpecvizError(
            f"the prompt ({len(prompt_ids)} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's context of {pair.max_context} tokens: shorten the prompt or ask for fewer tokens"
        )
    return spec, opts, prompt_ids, sampling, max_new_tokens, seed


def without_autograd(records: Iterator[IterationRecord]) -> Iterator[IterationRecord]:
    """Step a run with autograd off (`torch.inference_mode` around each step, in the thread that steps
    it): for callers such as the app, which drain runs from worker threads of their own."""
    import torch

    while True:
        with torch.inference_mode():
            record = next(records, None)
        if record is None:
            return
        yield record


@dataclass(frozen=True)
class RunResult:
    method: str
    prompt_ids: tuple[int, ...]
    records: tuple[IterationRecord, ...]  # with oracle_sl filled
    summary: RunSummary


def generate(
    method: str, pair: ModelPair, prompt: str | Sequence[int], *, chat: bool | None = None, **kwargs: Any
) -> RunResult:
    """Run to the end, then fill each record's oracle speculation length and summarise."""
    prompt_ids = encode_prompt(pair, prompt, chat)
    records = list(run(method, pair, prompt_ids, **kwargs))
    records = fill_oracle_sl(pair, prompt_ids, records)
    return RunResult(method, tuple(prompt_ids), tuple(records), summarize(records))


def generate_median(
    method: str,
    pair: ModelPair,
    prompt: str | Sequence[int],
    *,
    repeats: int = 3,
    chat: bool | None = None,
    executor: Submitter | None = None,
    **kwargs: Any,
) -> RunResult:
    """`generate` timed for a fair one-prompt comparison: a short untimed warm-up run (first calls pay
    one-off costs), then `repeats` runs; the run with the median wall time is kept. Greedy runs emit
    the same tokens every time, so only the clock differs between them. Without an `executor` the
    runs share one made here, so the warm-up also warms a second lane's thread (PEARL's target)."""
    repeats = check_count("repeats", repeats, most=MAX_REPEATS)
    prompt_ids = encode_prompt(pair, prompt, chat)
    with nullcontext(executor) if executor is not None else series_executor() as lane:
        for _ in run(method, pair, prompt_ids, **{**kwargs, "max_new_tokens": WARMUP_TOKENS}, executor=lane):
            pass
        runs = sorted(
            (list(run(method, pair, prompt_ids, **kwargs, executor=lane)) for _ in range(repeats)),
            key=lambda rs: rs[-1].t_end,
        )
    records = fill_oracle_sl(pair, prompt_ids, runs[len(runs) // 2])
    return RunResult(method, tuple(prompt_ids), tuple(records), summarize(records))


def series_executor() -> ThreadPoolExecutor:
    """One thread for the second lane (PEARL's target) of a series of runs (`run(..., executor=)`):
    made on first use and kept until the series ends (`shutdown`, or `with`), so only the series'
    first run, a warm-up, pays a new thread's first model calls."""
    return ThreadPoolExecutor(1, thread_name_prefix="specviz-lane")


MAX_REPEATS = 9
WARMUP_TOKENS = 4
