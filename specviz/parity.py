"""Does a greedy output equal the target's own, and where it does not, is that a tie or a fault?

Greedy speculative decoding emits the target's argmax at every position, so in float32 its output
equals autoregressive decoding token for token. In bfloat16 or float16 two logits are often equal
within the dtype's rounding, and which of the two an argmax picks then depends on the order of the
sums (one token per pass or γ + 1 per pass: every layer's activations are rounded again, so the two
orders can put the same logit a rounding step or two apart). Such a position is a tie, not a fault of
the method: `compare` finds the first position where two outputs part and checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair

TIE_STEPS = 2  # logits this many rounding steps of the dtype apart (or closer) count as tied


@dataclass(frozen=True)
class Parity:
    same: bool  # the two outputs are equal token for token
    first_difference: int | None = None  # index into the new tokens where they part (None: same)
    tie: bool = False  # there, the target's two candidates are equal within its dtype's rounding

    @property
    def verdict(self) -> str:
        """'same', 'tie' or 'differs': a tie is the dtype's, a difference is a fault."""
        return "same" if self.same else "tie" if self.tie else "differs"


def compare(pair: ModelPair, prompt_ids: Sequence[int], reference: Sequence[int], output: Sequence[int]) -> Parity:
    """`output` against `reference` (the autoregressive output), both new tokens after `prompt_ids`."""
    reference, output = list(reference), list(output)
    if output == reference:
        return Parity(True)
    n = min(len(reference), len(output))  # the tokens both have
    k = next((i for i, (a, b) in enumerate(zip(reference[:n], output[:n], strict=True)) if a != b), None)
    if k is None:  # one stopped earlier: not a choice between two tokens
        return Parity(False, n)
    return Parity(False, k, is_tie(pair, [*prompt_ids, *reference[:k]], reference[k], output[k]))


@torch.inference_mode()
def is_tie(pair: ModelPair, context: Sequence[int], a: int, b: int) -> bool:
    """Whether the target's logits for tokens a and b after `context` are both within `TIE_STEPS`
    rounding steps of the largest (a step: the target dtype's eps at that magnitude). In float32
    that is ~2e-7 of the logit: only an exact tie."""
    device = pair.device
    logits = pair.target(input_ids=torch.tensor([list(context)], device=device), logits_to_keep=1).logits[0, -1]  # [V]
    top = logits.max()
    step = torch.finfo(pair.target.dtype).eps * top.abs().clamp_min(1.0)  # the dtype the target computed in
    return bool(((top - logits[[a, b]]).abs() <= TIE_STEPS * step).all())
