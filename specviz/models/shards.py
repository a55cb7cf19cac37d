"""Small models shipped in the repository as safetensors files of at most 20 MB each.

Hugging Face's `save_pretrained(max_shard_size=...)` cannot split one tensor, and a draft's tied
embedding ([49152, 256] float16 = 25 MB) is larger than a shard. So tensors are cut by rows into
pieces named `NAME@ROW`, spread over `weights-XXXXX.safetensors`, and put together again on load.
Matrices may be stored as int8 with one scale per row (`NAME#q8` and `NAME#scale`, w = q * scale),
a quarter of float32's bytes; they load back as floating point.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specviz.models.devices import moved

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MAX_SHARD_BYTES = (
    9_500_000  # under 10 MB a file: what a Hugging Face Space takes without LFS (and the repo's 20 MB rule)
)
SHARD_GLOB = "weights-*.safetensors"


def save_shards(
    state: dict[str, torch.Tensor],
    out: Path,
    dtype: torch.dtype = torch.float16,
    max_bytes: int = MAX_SHARD_BYTES,
    int8: bool = False,
) -> list[Path]:
    """Write `state` (tied weights once) as pieces of at most `max_bytes` each, in as few files as fit;
    with `int8`, every floating matrix as int8 rows and their scales."""
    from safetensors.torch import save_file

    if int8:
        state = quantize_matrices(state)
    pieces: list[tuple[str, torch.Tensor]] = []
    for name, tensor in state.items():
        t = (
            tensor.detach().to("cpu", dtype if tensor.is_floating_point() else tensor.dtype).contiguous()
        )  # ids stay ids
        if t.dim() == 0 or t.numel() * t.element_size() <= max_bytes:
            pieces.append((f"{name}@0", t))
            continue
        rows = max(1, max_bytes // (t[0].numel() * t.element_size()))  # rows per piece
        pieces += [(f"{name}@{r}", t[r : r + rows].clone()) for r in range(0, t.shape[0], rows)]
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, t in pieces:
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = t
        size += nbytes
    for old in out.glob(SHARD_GLOB):
        old.unlink()
    paths = []
    for i, shard in enumerate(shards):
        path = out / f"weights-{i + 1:05d}.safetensors"
        save_file(shard, str(path), metadata={"format": "pt", "split": "NAME@ROW pieces, see specviz/models/shards.py"})
        paths.append(path)
    return paths


def load_shards(folder: Path) -> dict[str, torch.Tensor]:
    """The state dict written by `save_shards` (pieces concatenated back by row)."""
    from safetensors.torch import load_file

    pieces: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for path in sorted(folder.glob(SHARD_GLOB)):
        for key, t in load_file(str(path)).items():
            name, row = key.rsplit("@", 1)
            pieces.setdefault(name, []).append((int(row), t))
    state = {
        name: parts[0][1] if len(parts) == 1 else torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])])
        for name, parts in pieces.items()
    }
    return dequantize_matrices(state)


def quantize_matrices(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each floating 2-D tensor as symmetric per-row int8 (`NAME#q8`) and float16 scales (`NAME#scale`)."""
    out = {}
    for name, t in state.items():
        if t.is_floating_point() and t.dim() == 2:
            w = t.detach().float()
            scale = (w.abs().amax(dim=1).clamp_min(1e-8) / 127).half()  # [rows]
            out[f"{name}#q8"] = (w / scale.float()[:, None]).round().clamp(-127, 127).to(torch.int8)
            out[f"{name}#scale"] = scale
        else:
            out[name] = t
    return out


def dequantize_matrices(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `quantize_matrices` (float32 w = q * scale); other tensors as they are."""
    out = {}
    for name, t in state.items():
        if name.endswith("#q8"):
            base = name.removesuffix("#q8")
            out[base] = t.float() * state[f"{base}#scale"].float()[:, None]
        elif not name.endswith("#scale"):
            out[name] = t
    return out


def has_shards(folder: Path) -> bool:
    return any(folder.glob(SHARD_GLOB))


def load_llama_dir(folder: Path, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """A Llama causal LM (or a `ReducedVocabDraft`) from config.json + `save_shards` weights, in eval mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from specviz.models.draft import ReducedVocabDraft, is_reduced

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    state = load_shards(folder)
    if is_reduced(config):
        model = ReducedVocabDraft(config, state["lm_head.vocab_ids"])
    else:
        model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(
            f"weights in {folder} do not fit its config: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    model.tie_weights()
    return moved(model, device, dtype).eval()  # floating tensors only: the head's token ids stay integers
