"""EAGLE-2 is lossless: greedy output equals autoregressive decoding, and sampled tokens follow the
target's distribution (the tree methods' sampling test). The head reads exactly the features that
teacher forcing gives, from the verification pass alone. Its sampling test is the registry-driven
one (tests/test_sampling_methods.py), as for every method."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import specviz
from specviz.eagle.features import features_of
from specviz.eagle.train import chain_features, depth_agreement, teacher_forced_loss
from specviz.errors import SpecvizError
from specviz.methods import default_race, get_method
from specviz.methods import eagle as eagle_method
from specviz.models.eagle import from_target, load_head, save_head
from specviz.models.tiny import TARGET_CONFIG, tiny_model

PROMPTS = ["def fibonacci(n):", [5, 17, 300, 42, 42, 42, 7]]


def test_eagle_is_registered_as_a_tree_method_off_by_default():
    """In the registry, so every registry-driven test, the race and the bench run it; the race does
    not tick it at first (the default race stays one method per seed paper)."""
    spec = get_method("eagle")
    assert spec.generate is eagle_method.eagle and spec.family.name == "head-drafted tree" and not spec.needs_draft
    assert "eagle" not in default_race()


def test_the_app_bounds_the_depth_as_a_speculation_length():
    """Each level is a pass of the head: a visitor may set at most the app's γ limit, the library more."""
    from specviz.serving.limits import AppLimits
    from specviz.serving.racing import app_options

    most = AppLimits().speculation_length
    assert app_options("eagle", {"depth": most}) == {"depth": most}
    with pytest.raises(SpecvizError, match="depth"):
        app_options("eagle", {"depth": most + 1})
    assert eagle_method.EagleOptions(depth=most + 1).depth == most + 1


def output(pair, prompt, **kw):
    return specviz.generate("eagle", pair, prompt, **kw)


@pytest.mark.parametrize("width,depth,nodes", [(1, 1, 1), (1, 4, 4), (3, 3, 8), (4, 5, 16)])
def test_greedy_output_equals_autoregressive(random_pair, width, depth, nodes):
    for prompt in PROMPTS:
        ar = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=30).summary.output_ids
        got = output(random_pair, prompt, max_new_tokens=30, tree_width=width, depth=depth, tree_nodes=nodes)
        assert got.summary.output_ids == ar, (prompt, width, depth, nodes)


def test_an_oracle_head_is_accepted_deep_and_keeps_the_output(random_pair, monkeypatch):
    """A head whose top token is always the target's next one on the true path: whole paths of
    `depth` drafts accepted, and the output is still AR's."""
    prompt = PROMPTS[1]
    ar = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=40).summary.output_ids
    full = list(prompt) + list(ar) + [0] * 10
    right = eagle_method.EagleDrafter._children

    def oracle(self, parent, depth, base, top):
        kids = right(self, parent, depth, base, top)
        want = self.head.vocab_ids.tolist().index(full[self.root_position + depth])
        first = eagle_method.Candidate(want, parent, depth, base)  # probability 1: ranked first
        return [first, *[c for c in kids if c.token != want][: len(kids) - 1]]

    monkeypatch.setattr(eagle_method.EagleDrafter, "_children", oracle)
    got = output(random_pair, prompt, max_new_tokens=40, tree_width=2, depth=4, tree_nodes=8)
    assert got.summary.output_ids == ar
    accepted = Counter(r.accepted for r in got.records)
    assert accepted[4] >= 5, accepted  # full paths of 4 drafts accepted


def test_the_head_reads_the_teacher_forced_features(random_pair, monkeypatch):
    """The features the drafter gets from each verification pass are those of the committed
    sequence by one teacher-forced prefill, at the positions it files them under."""
    seen: list[tuple[int, torch.Tensor]] = []
    kept = eagle_method.EagleDrafter.kept

    def spy(self, path, hidden):
        kept(self, path, hidden)
        seen.extend(self.pending)

    monkeypatch.setattr(eagle_method.EagleDrafter, "kept", spy)
    prompt = PROMPTS[1]
    got = output(random_pair, prompt, max_new_tokens=30, tree_width=3, depth=3, tree_nodes=8)
    ids = list(prompt) + list(got.summary.output_ids)
    feats = features_of(random_pair.target, torch.tensor([ids]))[0]  # [T, H]
    positions = [t for t, _ in seen]
    assert positions == list(range(len(ids) - 1))  # every committed position once, the prompt's from the first pass
    for t, f in seen:
        torch.testing.assert_close(f, feats[t], rtol=1e-4, atol=1e-4)


def test_the_head_cache_starts_from_the_whole_prompt(random_pair, monkeypatch):
    """The first pass files an entry for every prompt position, as training does: the first tree's
    root f̂ is the teacher-forced head's over the whole prompt, not over its last token alone."""
    reads: list[tuple[int, list[int], torch.Tensor]] = []
    read = eagle_method.EagleDrafter._read_pending

    def spy(self, ids):
        root = read(self, ids)
        reads.append((self.committed, list(ids), root))
        return root

    monkeypatch.setattr(eagle_method.EagleDrafter, "_read_pending", spy)
    prompt = PROMPTS[1]
    output(random_pair, prompt, max_new_tokens=6, head="untrained")
    committed, ids, root = reads[0]
    assert committed == len(prompt)  # entries t = 0 .. L-1 in the head's cache
    target = random_pair.target
    seq = torch.tensor([ids[: len(prompt) + 1]])  # the prompt and the first pass's token
    with torch.inference_mode():
        feats = features_of(target, seq)
        full = teacher_forced_loss(
            eagle_method.eagle_head(target, "untrained"), target, seq, feats, torch.ones_like(seq, dtype=torch.bool)
        )["f_hat"]
    torch.testing.assert_close(root, full[0, len(prompt) - 1], rtol=1e-4, atol=1e-4)


def test_records_count_the_heads_passes(random_pair, monkeypatch):
    """draft_forwards is the head passes each iteration drafted with: none before the first
    verification, then one to read the kept features and one per deeper level."""
    passes: list[int] = []
    forward = eagle_method.EagleDrafter._forward

    def spy(self, *args):
        passes.append(self.root_position)
        return forward(self, *args)

    monkeypatch.setattr(eagle_method.EagleDrafter, "_forward", spy)
    got = output(random_pair, PROMPTS[1], max_new_tokens=30, tree_width=2, depth=3, tree_nodes=6)
    counts = [r.draft_forwards for r in got.records]
    assert counts == [passes.count(r.position - 1) for r in got.records]
    assert counts[0] == 0 and counts[1] == 3
    for method in ("sssd", "streaming"):  # n-grams run no model; the streams ride on the target's pass
        others = specviz.generate(method, random_pair, PROMPTS[1], max_new_tokens=12).records
        assert all(r.draft_forwards == 0 for r in others), method


def test_drafting_entries_equal_the_teacher_forced_head(random_pair):
    """The head's cached, tree-masked entries give the same f̂ as one causal pass over the sequence
    (what training computes), so a head trained teacher-forced drafts as it was trained."""
    target = random_pair.target
    head = from_target(target).eval()
    ids = torch.tensor([[5, 17, 300, 42, 42, 42, 7, 9, 11]])
    feats = features_of(target, ids)  # [1, T, H]
    full = teacher_forced_loss(head, target, ids, feats, torch.ones_like(ids, dtype=torch.bool))["f_hat"]
    opts = eagle_method.EagleOptions(head="untrained")
    drafter = eagle_method.EagleDrafter(head, target, opts)
    drafter.pending = [(t, feats[0, t]) for t in range(4)]
    with torch.inference_mode():
        first = drafter._read_pending(ids[0].tolist())  # entries t = 0..3
    drafter.pending = [(t, feats[0, t]) for t in range(4, 8)]
    with torch.inference_mode():
        last = drafter._read_pending(ids[0].tolist())  # entries t = 4..7, after the cached ones
    torch.testing.assert_close(first, full[0, 3], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(last, full[0, 7], rtol=1e-4, atol=1e-4)


def test_tree_expansion_equals_the_chain_rounds_validation_counts(random_pair):
    """Drafting a chain along the true tokens (one expansion per level, tree-masked over the head's
    cache) gives the f̂ that `chain_features` computes in parallel rounds: validation by depth
    measures what drafting does."""
    target = random_pair.target
    head = from_target(target).eval()
    ids = torch.tensor([[5, 17, 300, 42, 42, 42, 7, 9, 11, 13]])
    feats = features_of(target, ids)
    rounds = chain_features(head, target, ids, feats, depths=3)
    drafter = eagle_method.EagleDrafter(head, target, eagle_method.EagleOptions(head="untrained"))
    s = 4  # the chain starts after the true features of positions 0..s
    drafter.pending = [(t, feats[0, t]) for t in range(s + 1)]
    drafter.root_position = s + 1  # the last committed token x_{s+1}
    vocab = head.vocab_ids.tolist()
    with torch.inference_mode():
        root = drafter._read_pending(ids[0].tolist())
        cands, outs = [], {-1: root}
        for d in (1, 2):
            cands.append(eagle_method.Candidate(vocab.index(int(ids[0, s + 1 + d])), d - 2, d, 0.0))
            drafter._expand(cands, [d - 1], outs)
    torch.testing.assert_close(root, rounds[0][0, s], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[0], rounds[1][0, s + 1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[1], rounds[2][0, s + 2], rtol=1e-4, atol=1e-4)


def test_a_saved_head_loads_for_its_target_only(random_pair, self_pair, tmp_path):
    head = from_target(random_pair.target)
    path = tmp_path / "head.safetensors"
    save_head(head, random_pair.target, path)
    back = load_head(random_pair.target, path)
    torch.testing.assert_close(back.fc.weight, head.fc.weight.half().float())
    other = tiny_model(seed=7, **TARGET_CONFIG)
    with pytest.raises(ValueError, match="another target"):
        load_head(other, path)


def test_depth_agreement_feeds_each_round_the_heads_own_features(random_pair, monkeypatch):
    """A head that returns the true f_{t+1} except at entry t0 and after a wrong input: depth 1
    misses t0 only, and each deeper round carries the miss one entry further (t0 .. t0 + d - 1)."""
    target = random_pair.target
    head = from_target(target).eval()
    ids = torch.tensor([[5, 17, 300, 42, 42, 42, 7, 9, 11, 13, 2, 40]])
    scored = torch.ones_like(ids, dtype=torch.bool)
    feats = features_of(target, ids)
    truth, t0 = feats[:, 1:], 4

    def fake(embeds, f_in, positions, mask, cache=None):
        wrong = (f_in - feats[:, :-1]).abs().amax(-1) > 1e-6  # [B, n] an input that is not f_t
        wrong[:, t0] |= ~wrong[:, t0]
        return torch.where(wrong[..., None], -truth, truth)

    monkeypatch.setattr(head, "forward", fake)
    n = ids.shape[1] - 1
    got = depth_agreement(head, target, ids, scored, depths=4, feats=feats)
    assert got == [(n - (d - 1) - d, n - (d - 1)) for d in range(1, 5)]


def test_a_fresh_head_agrees_less_than_a_perfect_one(random_pair):
    target = random_pair.target
    ids = torch.tensor([[5, 17, 300, 42, 42, 42, 7, 9, 11, 13, 2, 40]])
    got = depth_agreement(from_target(target).eval(), target, ids, torch.ones_like(ids, dtype=torch.bool), depths=2)
    assert all(a < c for a, c in got)


def test_eagle_loss_fits_a_sequence_and_agreement_rises(random_pair):
    """The training loss learns: a few AdamW steps on one sequence lower the loss and raise the
    head's top-1 agreement with the target at depth 1."""
    target = random_pair.target
    head = from_target(target).train()
    ids = torch.tensor([[5, 17, 300, 42, 42, 42, 7, 9, 11, 13, 2, 40, 77, 81, 90, 3]])
    scored = torch.ones_like(ids, dtype=torch.bool)
    feats = features_of(target, ids)
    before = depth_agreement(head, target, ids, scored, depths=1, feats=feats)[0]
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = teacher_forced_loss(head, target, ids, feats, scored)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    after = depth_agreement(head, target, ids, scored, depths=1, feats=feats)[0]
    assert losses[-1] < 0.7 * losses[0], losses
    assert after[0] > before[0], (before, after)


def test_the_head_option_reads_a_saved_head_and_refuses_a_missing_one(random_pair, tmp_path):
    path = tmp_path / "head.safetensors"
    save_head(from_target(random_pair.target), random_pair.target, path)
    ar = specviz.generate("autoregressive", random_pair, PROMPTS[1], max_new_tokens=12).summary.output_ids
    assert output(random_pair, PROMPTS[1], max_new_tokens=12, head=str(path)).summary.output_ids == ar
    with pytest.raises(SpecvizError, match="no EAGLE head at"):
        output(random_pair, PROMPTS[1], max_new_tokens=12, head=str(tmp_path / "missing.safetensors"))


def test_feature_chunks_resume_and_hold_the_prefill_features(random_pair, tmp_path):
    """Chunks are written whole and a rerun writes only the missing ones (a chunk without its index
    counts as missing); a batch read from them equals the prefill's features (to float16)."""
    from specviz.eagle.features import extract, padded
    from specviz.eagle.train import Features
    from specviz.train.draft.data import Example

    target = random_pair.target
    examples = [Example([5 + i, 17, 300, 42 + i, 7][: 3 + i % 3], 1, True, None) for i in range(5)]
    extract(target, examples, tmp_path, "train", chunk=2, batch_tokens=8, pad=0, seconds=0.0)  # stops after one
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["train-00000.json"]
    (tmp_path / "train-00001.npy").write_bytes(b"torn")  # a chunk cut off before its index
    extract(target, examples[:3], tmp_path, "train", chunk=2, batch_tokens=8, pad=0, seconds=None)  # --limit 3
    tokens, _ = extract(target, examples, tmp_path, "train", chunk=2, batch_tokens=8, pad=0, seconds=None)
    assert tokens == sum(len(e.ids) for e in examples[2:])  # chunk 1 again whole (the limit cut it), then 2
    indices = [4, 0, 3]
    ids, mask = padded([examples[i] for i in indices], pad=0)
    disk = Features(target, tmp_path).of(indices, examples, ids, mask)
    fly = Features(target, None).of(indices, examples, ids, mask)
    for b, i in enumerate(indices):
        n = len(examples[i].ids)
        torch.testing.assert_close(disk[b, :n], fly[b, :n], rtol=2e-3, atol=2e-3)


def test_the_step_through_rolls_back_the_heads_cache_not_a_draft_models(perturbed_pair):
    """EAGLE drafts with a head that keeps its own cache: the step-through must not say no draft ran
    (it said "no draft model ran, so there is no draft cache to roll back", true of SSSD only)."""
    from specviz.stepthrough import explain_iteration, recompute_for

    ids = specviz.encode_prompt(perturbed_pair, "def fibonacci(n):")
    records = list(specviz.run("eagle", perturbed_pair, ids, max_new_tokens=24, tree_width=2, depth=3, tree_nodes=6))
    i = next(i for i, r in enumerate(records) if r.drafted)
    mode = recompute_for(get_method("eagle"), perturbed_pair, {})
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute=mode)
    rollback = next(line for line in step.cache if line.startswith("rollback"))
    assert "draft head's cache" in rollback and "no draft model ran" not in rollback


def test_evaluate_scores_an_exported_head_on_held_out_answers(random_pair, tmp_path, monkeypatch, capsys):
    """`--evaluate HEAD` (the card's held-out figures) loads the exported head and scores the held-out
    answers only: a head that is the trained one scores what validation scored in training."""
    import json
    from types import SimpleNamespace

    from specviz.eagle import train as eagle_train
    from specviz.train.draft.data import Example

    target = random_pair.target
    val = [
        Example([5, 17, 300, 42, 42, 42, 7, 9, 11, 13], 4, True, None),
        Example([3, 8, 9, 21, 40, 2, 6], 3, True, None),
    ]
    monkeypatch.setattr("specviz.models.default.load_target", lambda device, dtype: (target, random_pair.tokenizer))
    monkeypatch.setattr(eagle_train, "corpus_data", lambda data, tokenizer: SimpleNamespace(train=[], val=val))
    head = from_target(target)
    path = tmp_path / "head.safetensors"
    save_head(head, target, path)
    assert (
        eagle_train.main(["--data", str(tmp_path), "--evaluate", str(path), "--val-sequences", "5", "--depths", "2"])
        == 0
    )
    got = json.loads(capsys.readouterr().out.splitlines()[0])
    cfg = eagle_train.TrainConfig(data=tmp_path, work=tmp_path, out=path, val_sequences=5, depths=2)
    want = eagle_train.validate(load_head(target, path).float(), target, val, cfg, 0)
    assert got["sequences"] == 2 and got["top1_d1"] == pytest.approx(want["top1_d1"])
    assert got["val_loss"] == pytest.approx(want["val_loss"]) and set(got) >= {"top1_d1", "top1_d2"}


def tree_sizes(pair, **kw):
    got = output(pair, PROMPTS[1], max_new_tokens=30, tree_width=2, depth=3, tree_nodes=8, **kw)
    ar = specviz.generate("autoregressive", pair, PROMPTS[1], max_new_tokens=30).summary.output_ids
    assert got.summary.output_ids == ar  # whatever the budget, the target's output
    return [r.speculation_length for r in got.records[1:]]  # the first has no features to draft from


def test_the_cost_model_sizes_each_tree_by_what_a_pass_costs(random_pair, monkeypatch):
    """Budget "fixed" verifies N nodes a pass (fewer only where the last tokens leave less depth); "cost
    model" as many as the pass's cost pays for: the same where a pass costs one step whatever its size (a
    GPU's roofline), none where each node costs 100 steps."""
    fixed = tree_sizes(random_pair, budget="fixed")
    assert fixed == sorted(fixed, reverse=True) and fixed.count(8) >= len(fixed) - 3
    flat = (tuple(1.0 for _ in range(65)), 0.0)
    monkeypatch.setattr(eagle_method, "pass_costs", lambda *args: flat)
    assert tree_sizes(random_pair) == fixed
    steep = (tuple(1.0 + 100 * n for n in range(65)), 0.0)
    monkeypatch.setattr(eagle_method, "pass_costs", lambda *args: steep)
    assert set(tree_sizes(random_pair)) == {0}


def test_the_cost_tables_are_the_devices_roofline(random_pair):
    """On a CPU, this machine's preset: the pass over n nodes as `verify_cost_ratio` prices it."""
    from specviz.cost import THIS_MACHINE, get_hardware, shape_from_model, verify_cost_ratio

    shape = shape_from_model(random_pair.target)
    verify, head = eagle_method.pass_costs(shape, torch.device("cpu"), 64, 2, 128)
    hw = get_hardware(THIS_MACHINE)
    assert verify[0] == 1.0 and verify[6] == pytest.approx(verify_cost_ratio(shape, hw, 6, 1, 128))
    assert list(verify) == sorted(verify) and 0 < head < verify[1]


def test_acceptance_bins_learn_what_a_score_means_from_the_verified_trees():
    """Before any verification a score reads as its chance (the tenth's centre); nodes of scores near
    0.35 that the target always keeps pull that tenth's chance up, and the other tenths stay put."""
    bins = eagle_method.AcceptanceBins()
    assert bins.chance(0.35) == pytest.approx(0.35) and bins.chance(1.0) == pytest.approx(0.95)
    for _ in range(8):
        bins.observe([0.34, 0.36, 0.05], kept={0, 1})  # both 0.3-0.4 nodes kept, the 0.05 one not
    assert bins.chance(0.31) == pytest.approx((16 + 2 * 0.35) / 18)
    assert bins.chance(0.05) == pytest.approx((0 + 2 * 0.05) / 10)
    assert bins.chance(0.75) == pytest.approx(0.75)
