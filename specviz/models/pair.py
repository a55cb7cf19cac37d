"""A target and a draft that share a tokenizer, loaded once and shared by every run.

Loaded pairs are kept: the offline ones (tiny-random, default: a few hundred MB at most) up to
`MOST_OFFLINE_PAIRS`, and at most one pair from the hub (a preset or TARGET,DRAFT), which is let go
before another is loaded: four kept hub pairs could hold tens of GB (issue 41). `fits_here` says
whether a preset's weights fit in the memory free on this machine, counted from its config.
"""

from __future__ import annotations

import gc
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from numbers import Integral
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from specviz.errors import SpecvizError
from specviz.models import hub
from specviz.models.devices import moved, resolve_device, resolve_dtype
from specviz.models.modelpair import ModelPair, describe, eos_ids
from specviz.models.presets import PRESETS
from specviz.text import visible

__all__ = [
    "ModelPair",
    "check_pair",
    "describe",
    "encode_prompt",
    "eos_ids",
    "load_pair",
    "load_target",
    "load_target_pair",
    "pair_names",
    "readable_token",
]

# One load at a time: Hugging Face loading is not thread-safe (two concurrent loads of the default
# pair both fail with "Cannot copy out of meta tensor"), and a pair loaded once is shared anyway.
_LOADING = threading.Lock()


def load_pair(
    name: str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    trust_remote_code: bool = False,
) -> ModelPair:
    """Load (once; later calls return the same objects) the pair called `name`, or `target`+`draft`.

    name: "tiny-random" (offline, random weights), "default" (offline SmolLM2-135M-Instruct and its
    distilled draft), a preset from `specviz.models.presets.PRESETS`, or "TARGET,DRAFT" (hub ids or
    local directories).
    """
    key = _pair_key(name, target, draft, device, dtype, device_map, trust_remote_code)
    with _LOADING:  # a second caller (another visitor, the page's own pair check) waits for the first's pair
        return _load_pair(*key)


def is_loaded(name: str, device: str = "auto", dtype: str = "auto") -> bool:
    """Whether `load_pair(name, device=, dtype=)` would return a pair already loaded (no work)."""
    try:
        return _pair_key(name, None, None, device, dtype, None, False) in _load_pair
    except SpecvizError:
        return False


def _pair_key(
    name: str | None,
    target: str | None,
    draft: str | None,
    device: str,
    dtype: str,
    device_map: str | None,
    trust_remote_code: bool,
) -> tuple:
    """The loader's arguments for a pair name or a target and a draft ("T,D" split into both), each
    of the kind it must be (a key of the loaded pairs, so hashable)."""
    if name is not None and not isinstance(name, str):
        raise SpecvizError(
            f"the pair name must be text ('tiny-random', 'default', a preset or 'TARGET,DRAFT'), got {_kind(name)}"
        )
    for what, value in (("target", target), ("draft", draft)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise SpecvizError(f"{what} must be a hub id or a folder (text or a path), got {_kind(value)}")
    for what, value in (("device", device), ("dtype", dtype), ("device_map", device_map)):
        if not (isinstance(value, str) or (what == "device_map" and value is None)):
            raise SpecvizError(f"{what} must be text (e.g. 'auto'), got {_kind(value)}")
    if not isinstance(trust_remote_code, bool):
        raise SpecvizError(f"trust_remote_code must be True or False, got {_kind(trust_remote_code)}")
    if name and "," in name:
        target, draft = (s.strip() for s in name.split(",", 1))
        name = None
    if name is None:
        if not target or not draft:
            raise SpecvizError("give a pair name, or both a target and a draft model (hub ids or directories)")
        name = f"{target},{draft}"
    return name, target, draft, device, dtype, device_map, trust_remote_code


def _kind(value: Any) -> str:
    """A wrong argument as an error message shows it: short, whatever its size."""
    text = repr(value)
    return f"{text[:40]}... ({type(value).__name__})" if len(text) > 40 else text


def check_pair(pair: object) -> ModelPair:
    """`pair` if it is a loaded ModelPair, else a SpecvizError that says where one comes from."""
    if not isinstance(pair, ModelPair):
        hint = f" (load it first: specviz.load_pair({pair!r}))" if isinstance(pair, str) else ""
        raise SpecvizError(f"the pair must be a ModelPair from specviz.load_pair(...), got {type(pair).__name__}{hint}")
    return pair


def load_target(
    name: str, device: str = "cpu", dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, Any, tuple[int, ...]]:
    """(model, tokenizer, eos ids) of a target alone, for the trainers: 'default', 'tiny-random' or
    a hub id / folder; float32 on a CPU and bfloat16 elsewhere unless `dtype` says otherwise."""
    dev = resolve_device(device)
    dtype = dtype or (torch.float32 if dev.type == "cpu" else torch.bfloat16)
    if name == "default":
        from specviz.models.default import load_target as load_default

        model, tokenizer = load_default(dev, dtype)
    elif name == "tiny-random":
        from specviz.models.tiny import TARGET_CONFIG, tiny_model, tiny_tokenizer

        return moved(tiny_model(seed=1, **TARGET_CONFIG), dev, dtype), tiny_tokenizer(), (0,)
    else:
        tokenizer = hub.load_tokenizer(name)
        model = hub.load_causal_lm(name, dev, dtype)
    return model, tokenizer, eos_ids(model, tokenizer)


def load_target_pair(name: str) -> ModelPair:
    """The pair called `name` in float32 on the CPU or, when its draft is missing (methods without a
    draft need none), a pair of its target alone (the default pair's target, a hub id or a folder)."""
    try:
        return load_pair(name, device="cpu", dtype="float32")
    except SpecvizError:
        if name != "default" and not Path(name).is_dir():
            raise
    target, tok, eos = load_target(name, "cpu", torch.float32)
    cpu = torch.device("cpu")
    return ModelPair(
        f"{name} (target only)",
        target,
        None,
        tok,
        tok.chat_template is not None,
        eos,
        describe(name, None, target, None, cpu, torch.float32),
    )


def pair_names() -> list[str]:
    return ["default", "tiny-random", *PRESETS]


OFFLINE_PAIRS = ("tiny-random", "default")  # shipped with specviz, well under a billion parameters
MOST_OFFLINE_PAIRS = 4  # offline pairs kept loaded (one per device and dtype asked for)
MEMORY_HEADROOM = 1.25  # a pair fits where its weights take at most 1/this of the free memory (the rest:
# activations, KV caches, the loader's transient copies)


class LoadedPairs:
    """The loaded pairs, called like the loader they cache: every offline pair asked for (up to
    `MOST_OFFLINE_PAIRS`, least recently used let go first) and at most one hub pair."""

    def __init__(self) -> None:
        self._pairs: OrderedDict[tuple, ModelPair] = OrderedDict()

    def __call__(
        self,
        name: str,
        target: str | None,
        draft: str | None,
        device: str,
        dtype: str,
        device_map: str | None,
        trust_remote_code: bool,
    ) -> ModelPair:
        from specviz.models import fast
        from specviz.models.cpu import prepack_linears

        key = (name, target, draft, device, dtype, device_map, trust_remote_code)
        if key in self._pairs:
            self._pairs.move_to_end(key)
            return self._pairs[key]
        offline = name in OFFLINE_PAIRS
        if not offline:  # the other hub pair goes before this one loads: its memory is needed
            self._let_go([k for k in self._pairs if k[0] not in OFFLINE_PAIRS])
        pair = _build_pair(name, target, draft, device, dtype, device_map, trust_remote_code)
        prepack_linears(pair.target)  # float32 on CPU only: few-token forwards get much cheaper
        prepack_linears(pair.draft)
        fast.decoder(pair.target)  # the fast step's weights, laid out now rather than in the first race
        pair.info["engine"] = fast.engine_name(pair.target)
        self._pairs[key] = pair
        kept = [k for k in self._pairs if k[0] in OFFLINE_PAIRS]
        self._let_go(kept[: max(0, len(kept) - MOST_OFFLINE_PAIRS)])
        return pair

    def _let_go(self, keys: list[tuple]) -> None:
        for key in keys:
            del self._pairs[key]
        if keys:
            gc.collect()  # a model's modules hold reference cycles: free its weights now, not at the next collection

    def __contains__(self, key: tuple) -> bool:
        return key in self._pairs

    def loaded(self) -> list[str]:
        """Names of the pairs held, least recently used first."""
        return [key[0] for key in self._pairs]

    def cache_clear(self) -> None:
        self._let_go(list(self._pairs))


_load_pair = LoadedPairs()


@cache
def preset_params(name: str) -> int | None:
    """Parameters of a preset's target and draft, counted from their configs (no weights read), or
    None where a config cannot be read here (offline, not in the local cache)."""
    preset = PRESETS[name]
    try:
        return sum(hub.count_params(model_id) for model_id in (preset.target, preset.draft))
    except (SpecvizError, ImportError, ValueError):  # no config here, or a model class this transformers lacks
        return None


def free_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on `device`: the GPU's free memory, or the host's MemAvailable
    (Linux); None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def fits_here(name: str, device: str = "auto", dtype: str = "auto", free: int | None = None) -> bool:
    """Whether the pair called `name` can be held here: an offline pair always; a preset when its
    weights, in the dtype it would load in (twice in float32 on a CPU, where the matmuls read oneDNN's
    packed copies: `cpu.pack_weight`), take at most 1/MEMORY_HEADROOM of `free` bytes (default:
    measured now). A preset whose size or the free memory cannot be read does not fit."""
    if name in OFFLINE_PAIRS:
        return True
    params = preset_params(name) if name in PRESETS else None
    dev = resolve_device(device)
    free = free_memory(dev) if free is None else free
    if params is None or free is None:
        return False
    element = torch.empty((), dtype=resolve_dtype(dtype, dev, params)).element_size()
    copies = 2 if dev.type == "cpu" and element == 4 else 1  # float32 on a CPU: matmuls read oneDNN's copies too
    return MEMORY_HEADROOM * copies * params * element <= free


def _build_pair(
    name: str,
    target: str | None,
    draft: str | None,
    device: str,
    dtype: str,
    device_map: str | None,
    trust_remote_code: bool,
) -> ModelPair:
    dev = resolve_device(device)
    if name in ("tiny-random", "default"):  # well under a billion parameters: float32 wherever `auto`
        dt = resolve_dtype(dtype, dev, params=0)
        if name == "tiny-random":
            from specviz.models.tiny import tiny_pair

            return tiny_pair(device=dev, dtype=dt)
        from specviz.models.default import load_default_pair

        return load_default_pair(device=dev, dtype=dt)
    if target is None:
        if name not in PRESETS:
            raise SpecvizError(
                f"unknown model pair '{name}'. Known pairs: {', '.join(pair_names())}; or 'TARGET,DRAFT'."
            )
        target, draft = PRESETS[name].target, PRESETS[name].draft
    # `_pair_key` gives a target and a draft together or neither (a name): the draft is set wherever the target is.
    params = (
        None
        if dtype != "auto" or dev.type == "cpu"
        else sum(hub.count_params(m, trust_remote_code) for m in (target, draft))  # type: ignore[arg-type,misc]
    )
    dt = resolve_dtype(dtype, dev, params)
    return _load_hub_pair(name, target, draft, dev, dt, device_map, trust_remote_code)  # type: ignore[arg-type]


def _load_hub_pair(
    name: str,
    target_id: str,
    draft_id: str,
    dev: torch.device,
    dt: torch.dtype,
    device_map: str | None,
    trust_remote_code: bool,
) -> ModelPair:
    tokenizer = hub.load_tokenizer(target_id, trust_remote_code)
    draft_tokenizer = hub.load_tokenizer(draft_id, trust_remote_code)
    if draft_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise SpecvizError(
            f"'{draft_id}' does not share the tokenizer of '{target_id}': speculative decoding needs "
            "a draft with the same vocabulary (e.g. a smaller model of the same family)."
        )
    target = hub.load_causal_lm(target_id, dev, dt, device_map, trust_remote_code)
    draft_model = hub.load_causal_lm(draft_id, dev, dt, None if device_map is None else "auto", trust_remote_code)
    return ModelPair(
        name=name,
        target=target,
        draft=draft_model,
        tokenizer=tokenizer,
        chat=tokenizer.chat_template is not None,
        eos_token_ids=eos_ids(target, tokenizer),
        info=describe(target_id, draft_id, target, draft_model, dev, dt),
    )


def readable_token(tokenizer: Any, token_id: int) -> str:
    """A token as a reader sees it: its decoded text with spaces shown as '·' and line breaks as '⏎'
    (not the tokenizer's internal piece, e.g. 'Ġgran')."""
    return visible(tokenizer.decode([int(token_id)]))


def encode_prompt(pair: ModelPair, prompt: str | Sequence[int], chat: bool | None = None) -> list[int]:
    """Token ids of a prompt: text (through the chat template when the pair uses one) or ids as given."""
    check_pair(pair)
    if chat is not None and not isinstance(chat, bool):
        raise SpecvizError(f"chat must be True, False or None (the pair's default), got {chat!r}")
    if isinstance(prompt, str):
        if not prompt.strip():
            raise SpecvizError("the prompt is empty: type some text")
        bad = next((i for i, ch in enumerate(prompt) if 0xD800 <= ord(ch) <= 0xDFFF), None)
        if bad is not None:
            raise SpecvizError(f"the prompt is not valid Unicode text (a lone surrogate at character {bad})")
        tok = pair.tokenizer
        if (pair.chat if chat is None else chat) and tok.chat_template:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return list(tok(prompt, add_special_tokens=False)["input_ids"])
        return list(tok(prompt)["input_ids"])
    if isinstance(prompt, (bytes, bytearray)) or not (hasattr(prompt, "tolist") or isinstance(prompt, Sequence)):
        raise SpecvizError(f"the prompt must be text or a list of token ids, got {type(prompt).__name__}")
    ids = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)
    if not isinstance(ids, list):  # a 0-d tensor or array: one number, not a sequence of ids
        raise SpecvizError(f"the prompt must be text or a list of token ids, got one number ({ids!r:.40})")
    if not ids:
        raise SpecvizError("the prompt is empty: give at least one token id")
    wrong = [t for t in ids if isinstance(t, bool) or not (isinstance(t, Integral) and 0 <= int(t) < pair.vocab_size)]
    if wrong:
        raise SpecvizError(f"token ids must be integers in [0, {pair.vocab_size}); got {wrong[:5]!r}")
    return [int(t) for t in ids]
