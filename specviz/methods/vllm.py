"""vLLM's own decoding, raced beside specviz's methods: the target alone, n-gram speculation (prompt
lookup), a draft model and suffix decoding, each a server of vLLM's (`specviz.engines.vllm`), read over HTTP.

One record per engine step. The tokens come from the stream; how many a step drafted and accepted
from vLLM's per-step counts, which arrive with the last chunk, so a speculative run's records are
written when its request ends (the target alone's stream token by token); until then its tokens go to
the run's `preview` as they arrive (the Race shows them, not yet coloured). A step's accepted drafts
are its first tokens; vLLM counts the drafts it rejected but does not name them, and reports no p or
q: the records say so (`EngineExtra`) instead of inventing them. Times are the client's: a step ends
when its tokens arrive, drafting and verifying together, the HTTP round trip included.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.cost.families import ENGINE_CHAIN, TARGET_ALONE
from specviz.decoding import Decoding
from specviz.engines import vllm as engine
from specviz.errors import SpecvizError
from specviz.extras import EngineExtra
from specviz.methods import BASELINE, all_methods, get_method, register
from specviz.methods.autoregressive import NoOptions
from specviz.methods.options import MethodOptions, count, number
from specviz.records import IterationRecord
from specviz.sampling import SamplingConfig
from specviz.verify import Verdict

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

Progress = Callable[[str], None]
PROBE_TOKENS = 8  # greedy tokens a user's server must agree on with the pair's target before it is raced
PAPER = "vLLM 0.32 (Kwon et al. 2023), its speculative decoding"


@dataclass(frozen=True)
class Step:
    tokens: tuple[int, ...]
    accepted: int
    drafted: int  # as vLLM counts them (0: a step that verified no drafts)
    rejected: int  # of them, the ones its target turned down (0 as well where the budget cut the step short)
    t_start: float
    t_end: float
    steps_in_chunk: int = 1
    placed: bool = True


def engine_steps(chunks: list[engine.Chunk], counts: engine.StepCounts | None, t0: float) -> list[Step]:
    """The engine's steps from the chunks' tokens and its per-step counts, in order.

    The first token is the prompt's pass (no drafts). vLLM counts only the steps that verified drafts;
    a step of a+1 tokens is the next counted step when it has a accepted drafts, and a one-token step
    that drafted nothing (no n-gram matched) is absent from the counts. A one-token step and a counted
    step that accepted nothing look alike: where a run has both, its one-token steps are marked `placed=False`.
    Several steps in one chunk share its time evenly."""
    counted = deque(zip(counts.accepted, counts.drafted, strict=True)) if counts is not None else deque()
    total = sum(len(c.tokens) for c in chunks)
    uncounted = total - 1 - sum(a + 1 for a, _ in counted)  # one-token steps with no drafts, besides the first
    certain = uncounted <= 0 or all(a > 0 for a, _ in counted)  # no one-token step of each kind to mistake
    steps: list[Step] = []
    t_prev, first = t0, True
    for n, chunk in enumerate(chunks):
        rest, pieces = list(chunk.tokens), []
        last_chunk = n == len(chunks) - 1
        while rest:
            if first:
                pieces.append((rest[:1], 0, 0, 0, True))
                rest, first = rest[1:], False
            elif counted and (counted[0][0] + 1 <= len(rest) or last_chunk):
                a, k = counted.popleft()
                take = min(a + 1, len(rest))
                pieces.append((rest[:take], min(a, take), k, k - a if take == a + 1 else 0, certain or take > 1))
                rest = rest[take:]
            else:
                pieces.append((rest[:1], 0, 0, 0, certain))
                rest = rest[1:]
        share = (chunk.t - t_prev) / max(1, len(pieces))
        for i, (tokens, a, k, rejected, placed) in enumerate(pieces):
            start = t_prev + i * share
            steps.append(Step(tuple(tokens), a, k, rejected, start, start + share, len(pieces), placed))
        t_prev = chunk.t
    return steps


def step_record(dec: Decoding, step: Step, draft_forwards: int) -> IterationRecord:
    """One engine step through `Decoding.commit`: its accepted drafts, then its own token."""
    a = step.accepted
    drafted = list(step.tokens[:a])
    verdict = Verdict(
        accepted=a, next_token=step.tokens[a] if len(step.tokens) > a else None, p_drafted=None, q_drafted=None
    )
    extra = EngineExtra(unreported=step.rejected, steps_in_chunk=step.steps_in_chunk, placed=step.placed)
    return dec.commit(
        drafted=drafted,
        verdict=verdict,
        speculation_length=step.drafted,
        t_start=step.t_start,
        t_drafted=step.t_start,
        draft_forwards=draft_forwards if step.drafted else 0,
        extra=(extra,),
        t_end=step.t_end,
    )


def serve(dec: Decoding, speculative: dict[str, Any] | None, method: str) -> Iterator[IterationRecord]:
    """Run `dec`'s request on vLLM's server for this pair and config; yield its steps' records."""
    server = _server(dec.pair, dec.ids, speculative, method)
    t0 = dec.now()
    chunks: list[engine.Chunk] = []
    counts = None
    sampling = dataclasses.asdict(dec.sampling)
    items = engine.stream(server, dec.ids, dec.remaining, sampling, tuple(sorted(dec.eos)), dec.seed, dec.now)
    try:
        for item in items:
            if isinstance(item, engine.StepCounts):
                counts = item
            elif speculative is None:  # one token a step: its records need no counts, and stream as they come
                for step in engine_steps([item], None, chunks[-1].t if chunks else t0):
                    yield step_record(dec, step, 0)
                chunks.append(item)
            else:
                chunks.append(item)
                if dec.preview is not None:
                    dec.preview(item.tokens)
    finally:
        items.close()
    if speculative is None:
        return
    if counts is None:
        raise SpecvizError(f"{server.url} runs no speculation, or reports no per-step counts: {engine.DETAILED}")
    forwards = int(speculative["num_speculative_tokens"]) if speculative["method"] == "draft_model" else 0
    for step in engine_steps(chunks, counts, t0):
        yield step_record(dec, step, forwards)
        if dec.done:
            return


def _server(
    pair: ModelPair,
    prompt_ids: list[int],
    speculative: dict[str, Any] | None,
    method: str,
    progress: Progress = engine.say_nothing,
) -> engine.Server:
    """The server that runs `method` for this pair: the user's (vetted once against the pair's target on this
    prompt), or one specviz starts (or has running) for the pair and the speculative config."""
    given = engine.SERVERS.given.get(method)
    if given is not None:
        if not given.checked:  # it must serve this pair's target: its greedy tokens for this prompt are the pair's
            progress(f"checking the vLLM server at {given.url}")
            engine.check_server(given, prompt_ids, _target_greedy(pair, prompt_ids), speculative is not None)
            given.checked = True
        return given
    _check_head_size(pair.target)
    ranks = engine.tensor_parallel()
    if pair.target.config.num_attention_heads % ranks:
        raise SpecvizError(
            f"{engine.TP_ENV}={ranks}: vLLM splits the attention heads over the ranks, and this pair's target has "
            f"{pair.target.config.num_attention_heads}"
        )
    from specviz.engines.export import model_folder

    folder = model_folder(pair.target, pair.tokenizer)
    spec_json = ""
    if speculative is not None:
        config = dict(speculative)
        if config.get("method") == "draft_model":
            _check_head_size(pair.draft_model)
            config["model"] = model_folder(pair.draft_model, pair.tokenizer)
        spec_json = json.dumps(config, sort_keys=True)
    server = engine.ServerConfig(
        model=folder,
        served_name=pair.name,
        max_model_len=pair.max_context,
        speculative_config=spec_json,
        tensor_parallel_size=ranks,
    )
    return engine.SERVERS.get(server, progress)


def _target_greedy(pair: ModelPair, prompt_ids: list[int]) -> list[int]:
    """The pair's target's first PROBE_TOKENS greedy tokens for the prompt, by specviz's own baseline."""
    probe = Decoding(pair, prompt_ids, BASELINE, PROBE_TOKENS, SamplingConfig(), 0)
    for _ in get_method(BASELINE).generate(probe, NoOptions()):
        pass
    return probe.ids[probe.prompt_len :]


def preparer(method: str, config: Callable[[Any], dict[str, Any]] | None) -> Callable[..., None]:
    """A row's `prepare` hook: its server up (started, or the user's vetted) before its run, saying how it goes."""

    def prepare(pair: ModelPair, prompt_ids: list[int], opts: Any, progress: Progress) -> None:
        _server(pair, prompt_ids, config(opts) if config else None, method, progress)

    return prepare


def _check_head_size(model: Any) -> None:
    c = model.config
    head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if model.device.type == "cpu" and head not in engine.CPU_HEAD_SIZES:
        raise SpecvizError(
            f"vLLM's CPU backend does not run attention heads of size {head} (this pair's); it runs "
            + ", ".join(map(str, engine.CPU_HEAD_SIZES))
        )


@dataclass(frozen=True)
class NgramOptions(MethodOptions):
    num_speculative_tokens: int = count(4, help="vLLM's γ: most tokens copied per step")
    prompt_lookup_max: int = count(4, help="longest suffix vLLM matches")
    prompt_lookup_min: int = count(1, at_most="prompt_lookup_max", help="shortest suffix it falls back to")


@dataclass(frozen=True)
class DraftOptions(MethodOptions):
    num_speculative_tokens: int = count(4, help="vLLM's γ: tokens the draft model proposes per step")


@dataclass(frozen=True)
class SuffixOptions(MethodOptions):
    num_speculative_tokens: int = count(24, help="vLLM's γ: most tokens a step may draft from the suffix trees")
    max_tree_depth: int = count(24, help="depth of the suffix trees: the matched suffix and the draft together")
    max_spec_factor: float = number(1.0, 0.1, 8.0, help="a draft is at most this many times the matched suffix")
    min_token_prob: float = number(0.1, 0.0, 1.0, help="drafts only tokens this frequent after the match")
    max_cached_requests: int = count(
        0, least=0, most=100_000, help="past requests' outputs kept as a datastore (0: this request's only)"
    )


def ngram_config(opts: NgramOptions) -> dict[str, Any]:
    names = ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
    return {"method": "ngram", **{k: getattr(opts, k) for k in names}}


def draft_config(opts: DraftOptions) -> dict[str, Any]:
    return {"method": "draft_model", "num_speculative_tokens": opts.num_speculative_tokens}


def suffix_config(opts: SuffixOptions) -> dict[str, Any]:
    names = ("max_tree_depth", "max_spec_factor", "min_token_prob", "max_cached_requests")
    return {
        "method": "suffix",
        "num_speculative_tokens": opts.num_speculative_tokens,
        **{f"suffix_decoding_{k}": getattr(opts, k) for k in names},
    }


@register(
    "vllm",
    label="vLLM, target alone",
    short_label="vLLM",
    description="vLLM's engine decoding the target alone, in its own process, read over HTTP (its OpenAI server).",
    paper=PAPER,
    options=NoOptions,
    family=TARGET_ALONE,
    needs_draft=False,
    rank=90,
    extras=(EngineExtra,),
    engine="vLLM",
    prepare=preparer("vllm", None),
)
def vllm_target(dec: Decoding, opts: NoOptions) -> Iterator[IterationRecord]:
    return serve(dec, None, "vllm")


@register(
    "vllm_ngram",
    label="vLLM n-gram",
    short_label="vLLM n-gram",
    description="vLLM's n-gram speculation (prompt lookup): drafts copied from the prompt and output, verified by "
    "its engine.",
    paper=PAPER,
    options=NgramOptions,
    family=ENGINE_CHAIN,
    needs_draft=False,
    rank=91,
    extras=(EngineExtra,),
    engine="vLLM",
    prepare=preparer("vllm_ngram", ngram_config),
)
def vllm_ngram(dec: Decoding, opts: NgramOptions) -> Iterator[IterationRecord]:
    return serve(dec, ngram_config(opts), "vllm_ngram")


@register(
    "vllm_draft",
    label="vLLM draft model",
    short_label="vLLM draft",
    description="vLLM's speculative decoding with the pair's draft model (exported to a folder vLLM loads).",
    paper=PAPER,
    options=DraftOptions,
    family=ENGINE_CHAIN,
    needs_draft=True,
    rank=92,
    extras=(EngineExtra,),
    engine="vLLM",
    prepare=preparer("vllm_draft", draft_config),
)
def vllm_draft(dec: Decoding, opts: DraftOptions) -> Iterator[IterationRecord]:
    return serve(dec, draft_config(opts), "vllm_draft")


@register(
    "vllm_suffix",
    label="vLLM suffix decoding",
    short_label="vLLM suffix",
    description="vLLM's suffix decoding (Oliaro et al. 2024, Arctic Inference's suffix trees): drafts from suffix "
    "trees of the prompt and the output, and of past requests' outputs where it keeps them, verified by its engine.",
    paper=PAPER,
    options=SuffixOptions,
    family=ENGINE_CHAIN,
    needs_draft=False,
    rank=93,
    extras=(EngineExtra,),
    engine="vLLM",
    prepare=preparer("vllm_suffix", suffix_config),
)
def vllm_suffix(dec: Decoding, opts: SuffixOptions) -> Iterator[IterationRecord]:
    return serve(dec, suffix_config(opts), "vllm_suffix")


def give_urls(items: list[str]) -> None:
    """`--vllm-url NAME=URL` (repeatable; or $SPECVIZ_VLLM_URLS, comma-separated): the method NAME (one of the
    vLLM rows) is served by the vLLM server at URL instead of one specviz starts."""
    names = [s.name for s in all_methods() if s.engine == "vLLM"]
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or name.strip() not in names:
            raise SpecvizError(f"--vllm-url takes NAME=URL, NAME one of {', '.join(names)}; got {item!r}")
        engine.SERVERS.give(name.strip(), url.strip())
