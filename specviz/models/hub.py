"""Loading Hugging Face causal LMs by hub id or local directory, with one clear error when that fails."""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specviz.errors import ModelNotAvailable
from specviz.models.devices import moved

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether huggingface.co answers at all (checked once, in ~1 s at most).

    Without this, an offline machine spends ~50 s in download retries before failing.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        with socket.create_connection((host, 443), timeout=1.5):
            return True
    except OSError:
        return False


def _how_to_get(model_id: str) -> str:
    if Path(model_id).exists():
        return f"'{model_id}' is a folder here, but not one holding a Hugging Face causal language model."
    if hub_reachable():
        return f"Check the spelling of '{model_id}' on huggingface.co, or pass a local directory."
    return (
        f"This machine cannot reach huggingface.co and '{model_id}' is not in the local Hugging Face cache. "
        f"On a machine with internet run `hf download {model_id}` and copy the cache "
        "(~/.cache/huggingface) here, or pass the path of a directory that holds the model."
    )


def hub_kwargs(model_id: str, trust_remote_code: bool) -> dict[str, Any]:
    local = Path(model_id).exists() or not hub_reachable()
    return {"local_files_only": local, "trust_remote_code": trust_remote_code}


def load_tokenizer(model_id: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_id, **hub_kwargs(model_id, trust_remote_code))
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotAvailable(f"Could not load the tokenizer of '{model_id}'. {_how_to_get(model_id)}") from e


def load_causal_lm(
    model_id: str,
    device: torch.device,
    dtype: torch.dtype,
    device_map: str | dict | None = None,
    trust_remote_code: bool = False,
) -> PreTrainedModel:
    """An AutoModelForCausalLM in eval mode, on `device` (or spread by accelerate with `device_map`)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_id, dtype=dtype, device_map=device_map, **hub_kwargs(model_id, trust_remote_code)
        )
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotAvailable(f"Could not load the model '{model_id}'. {_how_to_get(model_id)}") from e
    if device_map is None:
        model = moved(model, device)
    return model.eval()


def count_params(model_id: str, trust_remote_code: bool = False) -> int:
    """Parameters of a model, from its config alone (the model is built on the `meta` device: no
    weights are read or allocated), for choosing a dtype before loading."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(model_id, **hub_kwargs(model_id, trust_remote_code))
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotAvailable(f"Could not load the config of '{model_id}'. {_how_to_get(model_id)}") from e
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return sum(p.numel() for p in model.parameters())
