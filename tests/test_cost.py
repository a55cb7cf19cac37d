"""The cost model: formulas against hand-computed values, operator counts against hand counts for a
tiny shape, and the roofline's regimes (memory-bound at batch 1, compute-bound at large batch)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from specviz.cost import (
    alpha_from_tokens_per_iteration,
    expected_tokens,
    forward_time,
    get_hardware,
    get_shape,
    improvement_factor,
    knee_tokens,
    operator_costs,
    optimal_gamma,
    optimal_speculation_length,
    osd_speedup,
    pearl_speedup,
    pearl_tokens_per_step,
    pearl_window,
    shape_from_config,
    shape_from_model,
    speculation_budget,
    speedup_with_verify_cost,
    tree_budget,
    verify_cost_ratio,
)
from specviz.cost.roofline import eager_costs
from specviz.cost.shapes import ModelShape

H100 = get_hardware("H100 SXM")
LLAMA7B = get_shape("Llama-2-7B")


# ----- formulas ---------------------------------------------------------------------------------


def test_expected_tokens_hand_values():
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert expected_tokens(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.0, 7) == 1.0


def test_improvement_factor_hand_value():
    # (1 - 0.8^5) / ((1 - 0.8)(4 * 0.25 + 1)) = 0.67232 / 0.4
    assert improvement_factor(0.8, 4, 0.25) == pytest.approx(1.6808)


@pytest.mark.parametrize("c, gamma", [(0.01, 7), (0.02, 6), (0.05, 4), (0.1, 3)])
def test_optimal_gamma_leviathan(c, gamma):
    assert optimal_gamma(0.6, c) == gamma


def test_measured_verify_cost_lowers_the_speedup_and_the_optimal_gamma():
    assert speedup_with_verify_cost(0.8, 4, 0.25, 1.0) == pytest.approx(improvement_factor(0.8, 4, 0.25))
    assert speedup_with_verify_cost(0.8, 4, 0.0, 2.0) == pytest.approx(expected_tokens(0.8, 4) / 2)
    flat = optimal_gamma(0.8, 0.0, max_gamma=20)  # free drafts, free verification: longest wins
    assert flat == 20
    linear = optimal_gamma(0.8, 0.0, max_gamma=20, verify_ratio=lambda g: 1 + 0.2 * g)
    assert linear < flat
    # by hand: E(γ)/(1 + 0.2γ) for γ = 1..4 is 1.5, 1.743, 1.840, 1.844, then falls (1.815 at 5)
    assert linear == 4


def test_tree_budget_keeps_the_nodes_that_pay_for_their_place_in_the_pass():
    scores = [0.8, 0.5, 0.4, 0.2, 0.15, 0.1, 0.05]
    free = [1.0] * 8  # a pass costs one step whatever its size (a GPU's flat roofline): every node pays
    assert tree_budget(scores, free) == 7
    steep = [1.0 + 0.061 * n for n in range(8)]  # this CPU's roofline, 0.061 of a step per node
    # by hand, (1 + sum of the first n) / (0.27 + 1 + 0.061 n) for n = 0..7: 0.787, 1.352, 1.652, 1.858,
    # 1.915, 1.937, 1.925, 1.886: five nodes
    assert tree_budget(scores, steep, draft_cost=0.27) == 5
    assert tree_budget([0.01, 0.01], steep) == 0  # nodes the target will not keep are not worth a row
    assert tree_budget(scores, steep[:3]) == 2  # never more nodes than the cost table covers
    assert tree_budget([], steep) == 0


def test_osd_speedup_from_raising_alpha():
    # E(0.8, 4) / E(0.6, 4) = 3.3616 / 2.3056
    assert osd_speedup(0.6, 0.8, 4, 0.1) == pytest.approx(3.3616 / 2.3056)
    assert osd_speedup(0.7, 0.7, 4, 0.1) == pytest.approx(1.0)


def test_alpha_from_tokens_inverts_expected_tokens():
    for alpha in (0.1, 0.5, 0.93):
        assert alpha_from_tokens_per_iteration(expected_tokens(alpha, 5), 5) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError):
        alpha_from_tokens_per_iteration(7.0, 5)


def test_pearl_window_and_closed_form():
    assert pearl_window(3.6) == 4 and pearl_window(0.3) == 1
    assert pearl_tokens_per_step(0.5, 2) == pytest.approx(0.75 / (0.5 * 1.25))  # = 1.2
    assert pearl_speedup(1.0, 4) == pytest.approx(4.0)  # α = 1, γ = c: c tokens per target forward
    assert pearl_speedup(0.0, 4) == pytest.approx(1.0)  # nothing accepted: autoregressive pace
    assert pearl_speedup(0.8, 4) > improvement_factor(0.8, 4, 1 / 4)  # beats vanilla SD at γ = c


def test_pearl_closed_form_matches_a_simulation_of_its_two_modes():
    rng = random.Random(0)
    alpha, gamma, steps, tokens, post = 0.7, 3, 40_000, 0, False
    for _ in range(steps):
        if not post:  # pre-verify: the first draft token is checked; one token either way
            tokens += 1
            post = rng.random() < alpha
        else:  # post-verify: γ tokens checked, stop at the first rejection (+ the correction)
            j = 0
            while j < gamma and rng.random() < alpha:
                j += 1
            tokens += j if j == gamma else j + 1
            post = j == gamma
    assert tokens / steps == pytest.approx(pearl_tokens_per_step(alpha, gamma), rel=0.02)


# ----- shapes -----------------------------------------------------------------------------------


def test_shape_counts_the_parameters_of_a_real_model():
    from specviz.models.tiny import TARGET_CONFIG, tiny_model

    model = tiny_model(0, **TARGET_CONFIG)
    shape = shape_from_model(model, name="tiny")
    h, layers = model.config.hidden_size, model.config.num_hidden_layers
    norms = 2 * h * layers + h  # RMSNorm weights, which the cost model ignores
    assert shape.n_params == sum(p.numel() for p in model.parameters()) - norms
    assert (shape.n_kv_heads, shape.head_dim, shape.dtype, shape.mlp_matrices) == (2, 16, "float32", 3)


def test_shape_from_a_gpt2_config():
    from transformers import GPT2Config

    shape = shape_from_config(GPT2Config(n_embd=64, n_layer=3, n_head=4, vocab_size=100), dtype="float16")
    assert (shape.n_layers, shape.hidden_size, shape.n_kv_heads, shape.intermediate_size) == (3, 64, 4, 256)
    assert shape.mlp_matrices == 2 and shape.bytes_per_param == 2.0


# ----- operators and the roofline ---------------------------------------------------------------

TINY = ModelShape(
    "hand",
    n_layers=2,
    hidden_size=8,
    n_heads=2,
    n_kv_heads=1,
    head_dim=4,
    intermediate_size=16,
    vocab_size=10,
    mlp_matrices=3,
    tied_embeddings=True,
    dtype="float32",
)


def test_operator_flops_and_bytes_against_hand_counts():
    # B=1, S=2 new tokens, L=3 cached; w = 4 bytes; fused QKV has 8 x (2+2) x 4 = 128 weights
    ops = {o.name: o for o in operator_costs(TINY, batch_size=1, n_tokens=2, context_len=3)}
    assert ops["qkv_proj"].flops == 2 * 2 * 2 * 128  # layers x 2 FLOPs x T x weights
    assert ops["qkv_proj"].bytes == 2 * 4 * (128 + 2 * (8 + 16))  # weights + T x (in + out)
    # causal pairs: 2 x 3 + (1 + 2) = 9; FLOPs 4 x heads x d x pairs per layer
    assert ops["attention"].flops == 2 * 4 * 2 * 4 * 9
    assert ops["attention"].bytes == 2 * 4 * (8 * 5 + 2 * 8 + 2 * 2 * 8)  # KV read, KV write, Q in + out
    assert ops["o_proj"].flops == 2 * 2 * 2 * 8 * 8
    assert ops["o_proj"].bytes == 2 * 4 * (64 + 2 * 16)
    assert ops["mlp"].flops == 2 * 2 * 2 * 3 * 8 * 16
    assert ops["mlp"].bytes == 2 * 4 * (3 * 8 * 16 + 2 * (16 + 48))
    assert ops["lm_head"].flops == 2 * 2 * 8 * 10
    assert ops["lm_head"].bytes == 4 * (80 + 2 * (8 + 10))


def test_batch_one_decoding_is_memory_bound_and_costs_the_weight_read():
    ideal = H100.ideal()
    t = forward_time(LLAMA7B, ideal, batch_size=1, n_tokens=1, context_len=0)
    read = LLAMA7B.n_params - LLAMA7B.vocab_size * LLAMA7B.hidden_size  # the embedding is looked up, not read
    weights_s = read * LLAMA7B.bytes_per_param / ideal.memory_bandwidth
    assert t == pytest.approx(weights_s, rel=0.01)
    assert all(o.bound(ideal, "bfloat16") == "memory" for o in operator_costs(LLAMA7B, 1, 1, 0))
    assert verify_cost_ratio(LLAMA7B, ideal, gamma=4) < 1.01  # five tokens for the price of one


def test_large_batches_are_compute_bound():
    ops = {o.name: o for o in operator_costs(LLAMA7B, batch_size=256, n_tokens=8, context_len=64)}
    assert ops["mlp"].bound(H100, "bfloat16") == "compute"
    assert ops["qkv_proj"].bound(H100, "bfloat16") == "compute"
    # compute-bound: doubling the tokens nearly doubles the (overhead-free) time
    t1 = forward_time(LLAMA7B, H100, 256, 8, 64, overhead=False)
    t2 = forward_time(LLAMA7B, H100, 256, 16, 64, overhead=False)
    assert 1.8 < t2 / t1 < 2.2


def test_overhead_is_added_once_per_forward():
    fused = replace(H100, eager_attention=False, growing_cache=False)
    with_o = forward_time(LLAMA7B, fused, 1, 1, 128)
    without = forward_time(LLAMA7B, fused, 1, 1, 128, overhead=False)
    assert with_o - without == pytest.approx(H100.overhead_s + 32 * H100.overhead_per_layer_s)


def test_partial_overlap_lies_between_the_roofline_max_and_the_sum():
    from specviz.cost.roofline import overlap_time

    assert overlap_time(1.0, 3.0) == pytest.approx(3.0)  # p = inf: the roofline's max
    assert overlap_time(1.0, 3.0, 1.0) == pytest.approx(4.0)  # p = 1: no overlap at all
    assert overlap_time(2.0, 2.0, 2.0) == pytest.approx(2.0 * 2**0.5)  # on the ridge: 2^(1/p) x max
    assert overlap_time(1e-9, 1e-3, 2.5) == pytest.approx(1e-3)  # far from the ridge: the max
    assert 3.0 < overlap_time(1.0, 3.0, 2.5) < 4.0
    # an engine with a finite p pays for it only where compute and memory times are close
    fused = replace(H100, eager_attention=False, growing_cache=False, overlap_exponent=math.inf)
    partial = replace(fused, overlap_exponent=2.5)
    assert forward_time(LLAMA7B, partial, 1, 1, 0) == pytest.approx(forward_time(LLAMA7B, fused, 1, 1, 0), rel=1e-3)
    knee = knee_tokens(LLAMA7B, fused, 1, 0)
    assert forward_time(LLAMA7B, partial, 1, knee, 0, overhead=False) > 1.2 * forward_time(
        LLAMA7B, fused, 1, knee, 0, overhead=False
    )


def test_an_eager_engine_pays_for_scores_and_a_growing_cache():
    """HF eager at batch 1: the materialised scores and the copied cache grow with the context; a
    fused engine's step barely does."""
    fused = replace(H100, eager_attention=False, growing_cache=False)
    grow = forward_time(LLAMA7B, H100, 1, 1, 4096) / forward_time(LLAMA7B, H100, 1, 1, 0)
    assert grow > forward_time(LLAMA7B, fused, 1, 1, 4096) / forward_time(LLAMA7B, fused, 1, 1, 0)
    extra = sum(op.bytes for op in eager_costs(LLAMA7B, 1, 1, 4096))
    cache = 2 * LLAMA7B.kv_bytes_per_token() * 4096  # read and rewritten once
    assert extra == pytest.approx(cache + 32 * 32 * 4097 * (4 * 2 + 8))


def test_knee_moves_with_batch_and_context():
    ideal = H100.ideal()
    knees = [knee_tokens(LLAMA7B, ideal, b, 0) for b in (1, 4, 16, 64)]
    assert knees == sorted(knees, reverse=True) and knees[0] > 4 * knees[2]
    # the knee sits near a fixed number of tokens per forward, B x S ~ peak / bandwidth (295 for bf16)
    assert 150 < knees[0] < 450 and 150 < 16 * knees[2] < 450
    # a long KV cache adds memory traffic per sequence: the knee comes later at batch 16
    assert knee_tokens(LLAMA7B, ideal, 16, 4096) > knees[2]


def test_speculation_budget_shrinks_with_batch():
    ideal = H100.ideal()
    budgets = [speculation_budget(LLAMA7B, ideal, b, 1024) for b in (1, 4, 16, 64)]
    assert budgets == sorted(budgets, reverse=True)
    assert budgets[0] > 50 and budgets[-1] < 10
    assert speculation_budget(LLAMA7B, ideal, 512, 128) == 0  # compute-bound: nothing is free
    # SSSD's point: a long KV cache keeps large batches memory-bound, so speculation stays cheap
    assert speculation_budget(LLAMA7B, ideal, 512, 4096) > 0
    # the budget's definition: γ costs ≤ 10% extra, γ + 1 more
    b16 = budgets[2]
    assert (
        verify_cost_ratio(LLAMA7B, ideal, b16, 16, 1024) <= 1.1 < verify_cost_ratio(LLAMA7B, ideal, b16 + 1, 16, 1024)
    )
    # per-forward overhead makes extra tokens relatively cheaper: a larger budget
    no_overhead = replace(H100, overhead_s=0.0, overhead_per_layer_s=0.0)
    assert speculation_budget(LLAMA7B, H100, 16, 1024) > speculation_budget(LLAMA7B, no_overhead, 16, 1024)


def test_batch_aware_speculation_length_shrinks_with_batch():
    ideal = H100.ideal()
    lengths = [optimal_speculation_length(0.8, LLAMA7B, ideal, b, 1024) for b in (1, 16, 256)]
    assert lengths[0] > lengths[1] > lengths[2] >= 1
    slower_memory = replace(ideal, memory_bandwidth=ideal.memory_bandwidth / 4)
    assert optimal_speculation_length(0.8, LLAMA7B, slower_memory, 64, 1024) > optimal_speculation_length(
        0.8, LLAMA7B, ideal, 64, 1024
    )


def test_measure_this_machine_returns_positive_rates():
    from specviz.cost import measure_this_machine

    hw = measure_this_machine(n=64, copy_mb=1, repeats=1)
    assert hw.peak_flops["float32"] > 0 and hw.memory_bandwidth > 0


@pytest.mark.parametrize(
    "device,name,preset",
    [
        ("cpu", "", "This machine (2-core CPU)"),
        ("cuda", "NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("cuda", "NVIDIA H200", "H200"),
        ("cuda", "NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("cuda", "NVIDIA A10G", "A10G"),
        ("cuda", "Tesla T4", "T4"),
        ("cuda", "NVIDIA GeForce GTX 1080", "H100 SXM"),  # no preset of its own: the H100's
        ("mps", "", "Apple M2 Max"),
    ],
)
def test_each_device_is_costed_by_the_preset_that_stands_for_it(device, name, preset):
    from specviz.cost import preset_for

    assert preset_for(device, name) == preset
