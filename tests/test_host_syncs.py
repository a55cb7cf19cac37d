"""Host syncs: how often a method makes the host wait for the device.

On a GPU every read of a tensor's values on the host (`.item()`, `.tolist()`, `float(t)`, `int(t)`,
`bool(t)`, `.cpu()`, `nonzero`) waits for every kernel queued before it. A speculative iteration
needs one such read to learn its verdict (and a drafter one per token it feeds back to itself); a
read per tree candidate or per sibling made Speculative Streaming wait ~50 times an iteration. This
CPU has no queue to wait for, so the tests count the reads themselves (a torch function mode sees
every one), the same calls `torch.cuda.set_sync_debug_mode` reports on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import specviz
from specviz.methods import get_method
from specviz.models.tiny import tiny_pair
from specviz.sampling import SamplingConfig
from specviz.verify import verify, verify_tree
from tests.conftest import own_methods

READS = frozenset({"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy", "nonzero"})
PROMPT = "def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)"


class HostReads(TorchFunctionMode):
    """Counts reads of tensor values on the host, in the thread that enters it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_counter_sees_every_kind_of_read():
    t = torch.arange(4.0)
    with HostReads() as reads:
        float(t[0]), int(t[1]), bool(t[2] > 1), t.tolist(), t[3].item(), t.cpu()
    assert reads.count == 6


def test_a_chain_verification_reads_the_device_once_greedy_and_twice_after_a_rejection():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    q = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(1)), -1)
    drafted = [int(logits[0].argmax()), int(logits[1].argmax()), 7, 8]
    with HostReads() as reads:
        verdict = verify(drafted, logits, q, SamplingConfig())
    assert (verdict.accepted, reads.count) == (2, 1)
    with HostReads() as reads:
        verdict = verify([3, 4, 5, 6], logits, q, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert verdict.accepted < 4 and reads.count == 2  # the verdict's values, then the residual's draw


def test_a_tree_verification_reads_once_greedy_and_once_per_sibling_tried_sampling():
    tokens, parents = [1, 2, 3, 4, 5, 6], [-1, -1, -1, 0, 0, 1]  # three siblings at the root
    logits = torch.zeros(7, 50)
    logits[:, 40] = 10.0  # the target wants token 40: every child is rejected
    with HostReads() as reads:
        verify_tree(tokens, parents, logits, None, SamplingConfig())
    assert reads.count == 1
    with HostReads() as reads:
        verdict = verify_tree(
            tokens, parents, logits, None, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0)
        )
    assert verdict.accepted == 0 and reads.count == 1 + 3 + 1  # p and q of the nodes, one per sibling, the draw


@pytest.mark.parametrize(
    ("method", "temperature"),
    [(s.name, t) for s in own_methods() if not s.is_oracle for t in (0.0, 1.0) if not t or s.supports_sampling],
)
def test_a_method_reads_the_device_about_once_an_iteration_plus_once_per_draft_token(method, temperature):
    """Reads per run <= the draft model's forward passes (each drafted token is fed back) + 3 per
    iteration (+ one per tree node when sampling: recursive rejection reads once per sibling it
    tries). The oracle is left out: it replays the target's greedy output to find each length."""
    spec = get_method(method)
    pair, options = tiny_pair(draft="perturbed"), spec.select({"speculation_length": 4})
    list(specviz.run(method, pair, PROMPT, max_new_tokens=8, temperature=temperature, **options))  # loads its parts
    with HostReads() as reads:
        records = list(specviz.run(method, pair, PROMPT, max_new_tokens=48, temperature=temperature, **options))
    per_node = 1 if temperature else 0
    budget = sum(r.draft_forwards + 3 + per_node * len(r.tree().tree_tokens if r.tree() else ()) for r in records)
    assert reads.count <= budget, f"{method}: {reads.count} host reads in {len(records)} iterations"
