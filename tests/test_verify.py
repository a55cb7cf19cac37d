"""The acceptance rule on toy distributions: greedy is exact, rejection sampling yields p."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specviz.sampling import SamplingConfig, probabilities
from specviz.verify import verify

T1 = SamplingConfig(temperature=1.0)
N = 6_000


def logits_of(p: list[float]) -> torch.Tensor:
    return torch.log(torch.tensor(p).clamp_min(1e-30))


def output_frequencies(p: list[float], q: list[float] | None, n: int = N, seed: int = 0) -> np.ndarray:
    """Draw x ~ q (or take x = argmax q for a one-hot drafter), verify one draft, count the emitted token."""
    gen = torch.Generator().manual_seed(seed)
    p_logits = torch.stack([logits_of(p), logits_of(p)])  # [k+1=2, V]
    q_t = torch.tensor([q]) if q is not None else None  # [1, V]
    counts = np.zeros(len(p))
    for _ in range(n):
        x = int(torch.multinomial(q_t[0], 1, generator=gen)) if q_t is not None else 0
        v = verify([x], p_logits, q_t, T1, gen)
        counts[x if v.accepted else v.next_token] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """Pearson's chi-square statistic and its p-value (survival function of chi2 with n-1 dof)."""
    stat = float(((counts - expected) ** 2 / expected).sum())
    dof = len(counts) - 1
    return stat, float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def assert_distributed_as(counts: np.ndarray, p: list[float]) -> None:
    expected = np.asarray(p) * counts.sum()
    support = expected > 0
    assert counts[~support].sum() == 0, "a token with p = 0 was emitted"
    stat, pvalue = chi_square_pvalue(counts[support], expected[support])
    assert pvalue > 1e-3, f"emitted tokens are not distributed as p: chi2={stat:.1f}, p-value={pvalue:.2g}"


@pytest.mark.parametrize(
    "p,q",
    [
        ([0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]),  # q very different from p
        ([0.4, 0.3, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]),  # p = q: everything accepted
        ([0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.5, 0.5]),  # q(x) = 0 where p(x) > 0
        ([0.0, 0.6, 0.4, 0.0], [0.7, 0.1, 0.1, 0.1]),  # the draft favours a token with p = 0
    ],
)
def test_rejection_sampling_yields_p(p, q):
    assert_distributed_as(output_frequencies(p, q), p)


def test_the_check_catches_a_wrong_rule():
    """Negative control: emitting the draft's token unverified follows q, and the check says so."""
    p, q = [0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]
    gen = torch.Generator().manual_seed(0)
    counts = np.bincount(torch.multinomial(torch.tensor(q), N, replacement=True, generator=gen).numpy(), minlength=4)
    with pytest.raises(AssertionError, match="not distributed as p"):
        assert_distributed_as(counts.astype(float), p)


def test_p_equal_q_accepts_everything():
    gen = torch.Generator().manual_seed(1)
    p = [0.4, 0.3, 0.2, 0.1]
    logits = torch.stack([logits_of(p)] * 4)
    q = torch.tensor([p] * 3)
    for _ in range(500):
        drafted = torch.multinomial(q, 1, generator=gen).squeeze(1).tolist()
        assert verify(drafted, logits, q, T1, gen).accepted == 3


def test_one_hot_drafter_yields_p():
    """A drafter without a distribution always proposes token 0; the output must still be p."""
    p = [0.3, 0.5, 0.2]
    assert_distributed_as(output_frequencies(p, None), p)


def test_multi_token_draft_keeps_each_position_distributed_as_p():
    """Three drafts from position-wise q_i: the first two emitted tokens follow p_0 and p_1."""
    gen = torch.Generator().manual_seed(2)
    ps = [[0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4], [0.2, 0.5, 0.3]]
    qs = torch.tensor([[0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.9, 0.05, 0.05]])
    logits = torch.stack([logits_of(p) for p in ps])  # [4, 3]
    first, second = np.zeros(3), np.zeros(3)
    for _ in range(N):
        drafted = torch.multinomial(qs, 1, generator=gen).squeeze(1).tolist()
        v = verify(drafted, logits, qs, T1, gen)
        emitted = [*drafted[: v.accepted], v.next_token]
        first[emitted[0]] += 1
        if len(emitted) > 1:
            second[emitted[1]] += 1
    assert_distributed_as(first, ps[0])
    assert_distributed_as(second, ps[1])


def test_greedy_accepts_the_matching_prefix_then_emits_the_target_argmax():
    logits = torch.tensor([[0.0, 5.0, 1.0], [4.0, 0.0, 1.0], [0.0, 1.0, 3.0], [9.0, 0.0, 0.0]])
    greedy = SamplingConfig()
    v = verify([1, 0, 1], logits, None, greedy)
    assert (v.accepted, v.next_token) == (2, 2)  # third draft 1 != argmax 2: corrected to 2
    v = verify([1, 0, 2], logits, None, greedy)
    assert (v.accepted, v.next_token) == (3, 0)  # all accepted: bonus token argmax of the last row
    v = verify([], logits[:1], None, greedy)
    assert (v.accepted, v.next_token) == (0, 1)
    assert v.p_drafted == ()


def test_without_a_bonus_row_all_accepted_leaves_the_target_token_out():
    """k rows instead of k + 1 (the target has not scored the token after the drafts yet): the same
    decisions, a correction on rejection, and no target token when every draft is accepted."""
    logits = torch.tensor([[0.0, 5.0, 1.0], [4.0, 0.0, 1.0], [0.0, 1.0, 3.0]])
    v = verify([1, 0, 2], logits, None, SamplingConfig())
    assert (v.accepted, v.next_token) == (3, None)
    v = verify([1, 0, 1], logits, None, SamplingConfig())
    assert (v.accepted, v.next_token) == (2, 2)
    # rejection sampling still yields p for the first token when only its row is known
    p, q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
    gen, counts = torch.Generator().manual_seed(1), np.zeros(3)
    for _ in range(N):
        x = int(torch.multinomial(torch.tensor(q), 1, generator=gen))
        v = verify([x], logits_of(p)[None], torch.tensor([q]), T1, gen)
        counts[x if v.accepted else v.next_token] += 1
        assert v.next_token is None if v.accepted else v.next_token is not None
    assert np.abs(counts / N - np.array(p)).max() < 0.03


def test_records_report_p_and_q_of_each_drafted_token():
    p = [0.5, 0.25, 0.25]
    q = torch.tensor([[0.2, 0.2, 0.6]])
    v = verify([2], torch.stack([logits_of(p)] * 2), q, T1, torch.Generator().manual_seed(0))
    assert v.p_drafted == pytest.approx((0.25,))
    assert v.q_drafted == pytest.approx((0.6,))


def test_top_k_and_top_p_shape_the_distribution():
    logits = logits_of([0.5, 0.3, 0.15, 0.05])
    assert probabilities(logits, SamplingConfig(1.0, top_k=2)).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    # mass before each token: 0, .5, .8, .95 -> top_p = 0.8 keeps the first two
    assert probabilities(logits, SamplingConfig(1.0, top_p=0.8)).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    hot = probabilities(logits, SamplingConfig(0.5))
    assert hot[0] > 0.5 and float(hot.sum()) == pytest.approx(1.0)


def test_top_k_applied_to_both_sides_stays_lossless():
    """With top-k, the draft samples from its own truncated q and the output follows truncated p."""
    cfg = SamplingConfig(1.0, top_k=2)
    p_logits = logits_of([0.1, 0.5, 0.3, 0.1])
    q = probabilities(logits_of([0.4, 0.1, 0.4, 0.1]), cfg)  # keeps tokens 0 and 2
    target = probabilities(p_logits, cfg).tolist()  # keeps tokens 1 and 2
    gen = torch.Generator().manual_seed(3)
    counts = np.zeros(4)
    for _ in range(N // 2):
        x = int(torch.multinomial(q, 1, generator=gen))
        v = verify([x], torch.stack([p_logits, p_logits]), q[None], cfg, gen)
        counts[x if v.accepted else v.next_token] += 1
    assert_distributed_as(counts, target)
