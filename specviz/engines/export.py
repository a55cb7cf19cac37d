"""A pair's models as folders an outside engine loads (config.json, safetensors, the tokenizer).

A model loaded from a complete local folder is served from that folder; a hub id is passed on as it
is (the engine downloads it on a machine that may). Any other model (the tiny-random pair, built in
code; the default draft, with its factorised embedding and reduced head) is written once under the
cache, in a folder named by a hash of its config and weights.

What exporting changes: a reduced-vocabulary draft (`models.draft.ReducedVocabDraft`) becomes a plain
Llama, its input table multiplied out (E·up, [V, d]) and its head widened to the whole vocabulary with
zero rows for the ids outside its K, where specviz's draft has -inf: the exported draft's logit for
those ids is 0, so it can propose one only where every one of its K logits is negative. Verification
keeps the output the target's either way; only the drafts (and so the acceptance) could differ there.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from specviz.paths import cache_dir

WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
TOKENIZERS = ("tokenizer.json", "tokenizer.model")


def model_folder(model: Any, tokenizer: Any) -> str:
    """Where an engine loads `model` (with the pair's tokenizer) from: its own folder, its hub id, or an export."""
    source = str(getattr(model, "name_or_path", "") or "")
    folder = Path(source) if source else None
    if folder is not None and folder.is_dir() and _complete(folder) and not _reduced(model):
        return str(folder.resolve())
    if source and not source.startswith((".", "/")) and source.count("/") == 1 and not Path(source).exists():
        return source  # a hub id
    return str(_export(model, tokenizer))


def _complete(folder: Path) -> bool:
    has = {p.name for p in folder.iterdir()}
    return "config.json" in has and any(w in has for w in WEIGHTS) and any(t in has for t in TOKENIZERS)


def _reduced(model: Any) -> bool:
    return getattr(model.config, "head_vocab", None) is not None


def _export(model: Any, tokenizer: Any) -> Path:
    import torch

    state = _plain_state(model)
    digest = hashlib.sha256(json.dumps(_plain_config(model), sort_keys=True).encode())
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().to(torch.float32).contiguous().numpy().tobytes())
    folder = cache_dir() / "engine-models" / digest.hexdigest()[:16]
    if not (folder / "config.json").is_file():
        _write(model, tokenizer, state, folder)
    return folder


def _plain_config(model: Any) -> dict[str, Any]:
    config = model.config.to_dict()
    for key in ("head_vocab", "embed_rank"):
        config.pop(key, None)
    config["architectures"] = ["LlamaForCausalLM"] if _reduced(model) else config.get("architectures")
    config["dtype"] = "float32"
    return config


def _plain_state(model: Any) -> dict[str, Any]:
    """The weights of a plain Llama (the reduced draft's multiplied out and widened, as the module doc says)."""
    import torch

    if not _reduced(model):
        return {k: v.detach().to(torch.float32) for k, v in model.state_dict().items()}
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("model.embed_tokens.", "lm_head."))}
    embed = model.model.embed_tokens
    head = model.lm_head
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    with torch.no_grad():
        table = embed.up(embed.table.weight.to(embed.up.weight.dtype))  # [V, d]
        wide = torch.zeros(vocab, hidden, dtype=head.proj.weight.dtype)
        wide[head.vocab_ids] = head.proj.weight
    state["model.embed_tokens.weight"], state["lm_head.weight"] = table, wide
    return {k: v.detach().to(torch.float32) for k, v in state.items()}


def _write(model: Any, tokenizer: Any, state: dict[str, Any], folder: Path) -> None:
    from safetensors.torch import save_file

    partial = folder.with_name(folder.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(partial / "model.safetensors"))  # tied: apart
    (partial / "config.json").write_text(json.dumps(_plain_config(model), indent=1))
    tokenizer.save_pretrained(str(partial))
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(str(partial))
    partial.rename(folder)
