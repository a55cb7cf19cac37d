"""Methods describe themselves (issue 37, item 5): a registry entry says the method's family (and with
it the formula that explains its speed), whether its speculation length is dynamic, whether it drafts
with the pair's draft as loaded, whether the Race tab ticks it at first and which Hugging Face peers
it is compared with. The Race tab, the why table, the cost model and the step-through read those
fields, so a new method needs its own file only; and no module outside specviz/methods names a method
(but a lab tab of one method's paper, which compares its fixed rows, each exception said in ALLOWED)."""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import specviz
from specviz import methods
from specviz.cost.families import CHAIN, ENGINE_CHAIN, HEAD_TREE, PARALLEL, SELF_DRAFTING_TREE, TARGET_ALONE, TREE
from specviz.cost.formulas import pearl_speedup, pearl_speedup_with_verify_cost, pearl_tokens_per_step
from specviz.cost.from_records import explain_run
from specviz.methods import all_methods, default_race, get_method, method_names
from specviz.methods.drafting import ModelDrafter, StaticLength
from specviz.methods.speculative import speculative_decoding
from specviz.plots.summary import summary_table
from specviz.serving.racing import RaceSettings, run_race
from specviz.stepthrough import explain_iteration, recompute_for
from specviz.ui.why import explain_race, why_markdown
from specviz.verify import residual
from tests.conftest import tab_context

ROOT = Path(specviz.__file__).parent
# Where a registry name may stand outside specviz/methods, and why (a folder ends in /).
# A string that is a path component (`ASSETS / "disco"`) names a folder, not a method, and is not counted.
ALLOWED = {
    "experiments/": "a paper's experiment compares a fixed list of variants: the rows of its table are data",
    "serving/stream.py": "the Online-learning stream compares OSD with the static draft and the target alone",
    "plots/online.py": "'osd' keys the online learner's rows of that stream (against 'static'), not a method",
    "cost/published.py": (
        "Spec-Bench's method names are another namespace; its rows of the target alone read 'autoregressive'"
    ),
    "train/disco.py": "'oracle' keys DISCO's replay of the oracle speculation length, a row of the paper's table",
    "train/streaming.py": "'streaming' keys the adapter's shape in a training checkpoint",
    "eagle/train.py": "'eagle' names the head trainer's progress line, not a run of the method",
    "tools/vllm_compare.py": "'vllm' keys vLLM's own run of the target alone in that tool's file (issue 51's figure)",
    "ui/disco.py": "the DISCO tab's rows are its paper's (DISCO, vanilla at the static SL_opt, the oracle); API name",
    "ui/pearl.py": "the PEARL tab's rows are its paper's (PEARL, vanilla, the target alone); its API name",
    "ui/online.py": "'osd' keys the online learner's rows of the Online stream (against 'static'), not a method",
    "ui/sssd_tree.py": "the SSSD tab draws the tree SSSD itself builds",
    "ui/streaming.py": "the Streaming tab draws the tree Speculative Streaming itself builds",
    "tools/hostile.py": "the hostile client sends what a stranger would: its probes' method options are data",
}


def method_names_in_code(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string constant of `path` that is a registry name: not docstrings or
    comments, nor the right side of a `/` (a folder)."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            skip.add(id(node.right))  # a path component
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip
    ]


def test_no_module_outside_methods_names_a_method():
    names = set(method_names())
    found, allowed_used = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("methods/"):
            continue
        hits = method_names_in_code(path, names)
        allowed = next((a for a in ALLOWED if rel == a or (a.endswith("/") and rel.startswith(a))), None)
        if allowed and hits:
            allowed_used.add(allowed)
        elif hits:
            found += [f"specviz/{rel}:{line} names {name!r}" for line, name in hits]
    assert not found, "method knowledge outside the registry (give the registry entry a field instead):\n" + "\n".join(
        found
    )
    stale = [a for a in ALLOWED if a not in allowed_used and (ROOT / a).exists()]
    assert not stale, f"these exceptions no longer name a method: remove them from ALLOWED: {stale}"


def test_the_scan_sees_a_name_in_code_and_not_in_docs_or_folders(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        '"""Runs "vanilla"."""\nASSETS = ROOT / "sssd"\n# "disco"\n'
        'def f():\n    """pearl"""\n    return run("vanilla")\n'
    )
    assert method_names_in_code(path, {"vanilla", "sssd", "disco", "pearl"}) == [(6, "vanilla")]


def test_each_entry_says_its_family_and_the_defaults_are_unchanged():
    families = {s.name: s.family for s in all_methods()}
    assert families == {
        "autoregressive": TARGET_ALONE,
        "vanilla": CHAIN,
        "osd": CHAIN,
        "heuristic": CHAIN,
        "pearl": PARALLEL,
        "prompt_lookup": CHAIN,
        "pearl-no-pre": PARALLEL,
        "pearl-no-post": PARALLEL,
        "confidence": CHAIN,
        "disco": CHAIN,
        "sssd": TREE,
        "eagle": HEAD_TREE,
        "streaming": SELF_DRAFTING_TREE,
        "oracle": CHAIN,
        "vllm": TARGET_ALONE,
        "vllm_ngram": ENGINE_CHAIN,
        "vllm_draft": ENGINE_CHAIN,
        "vllm_suffix": ENGINE_CHAIN,
    }
    # the Race tab's defaults before the registry held them, in registry order
    before = ("autoregressive", "vanilla", "prompt_lookup", "pearl", "sssd", "disco", "osd")
    assert default_race() == [s.name for s in all_methods() if s.name in before]
    assert {s.name for s in all_methods() if s.dynamic_length} == {
        "heuristic",
        "confidence",
        "disco",
        "pearl",
        "pearl-no-pre",
        "pearl-no-post",
        "oracle",
    }
    # what the step-through inferred before (needs the draft, carries no session): now said by each entry; an
    # outside engine's draft runs in its server, where the step-through cannot rerun it
    assert {s.name for s in all_methods() if s.drafts_with_pair_draft} == {
        s.name for s in all_methods() if s.needs_draft and s.session is None and not s.engine
    }
    assert {s.name for s in all_methods() if s.engine} == {"vllm", "vllm_ngram", "vllm_draft", "vllm_suffix"}


@dataclass(frozen=True)
class FixedOptions:
    pass  # γ is fixed at 3


def fixed_three(dec, opts: FixedOptions):
    yield from speculative_decoding(dec, ModelDrafter(dec), StaticLength(3))


@pytest.fixture
def fourteenth():
    """A 14th method, registered the way a new method file registers itself, and nothing else."""
    methods.register(
        "toy-fixed-3",
        label="Fixed γ = 3 (toy)",
        description="Vanilla SD with γ fixed at 3.",
        paper="this test",
        options=FixedOptions,
        family=CHAIN,
        in_default_race=True,
        rank=12,
    )(fixed_three)
    yield "toy-fixed-3"
    methods._REGISTRY.pop("toy-fixed-3")


def test_a_fourteenth_method_is_listed_raced_and_explained_with_no_other_edit(fourteenth, perturbed_pair):
    import gradio as gr

    from specviz.ui import race as race_tab

    with gr.Blocks() as demo:
        race_tab.build_tab(tab_context())
    boxes = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sv-methods"]
    assert ("Fixed γ = 3 (toy)", fourteenth) in [tuple(c) for c in boxes[0].choices] and fourteenth in boxes[0].value
    assert boxes[0].value == default_race()  # ticked when the page opens, in registry order

    settings = RaceSettings("def fibonacci(n):", ("autoregressive", fourteenth, "heuristic"), max_new_tokens=16)
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())  # the race as it ends
    assert [r.name for r in race.runs] == ["autoregressive", fourteenth, "heuristic"] and all(
        r.status == "done" for r in race.runs
    )
    row = next(r for r in explain_race(race) if r["method"] == "Fixed γ = 3 (toy)")  # the why table
    assert row["family"] == "chain" and row["verify_label"] == "T(γ+1)/T(1)" and 1 <= row["length"] <= 3
    assert "| Fixed γ = 3 (toy) | chain |" in why_markdown(race)
    base, mine = race.runs[0].records, race.runs[1].records  # the cost model, by the entry's family
    assert explain_run(mine, base, get_method(fourteenth).family)["predicted_speedup"] == row["predicted_speedup"]
    assert race_tab.race_outputs(race)["sl_choices"]["value"] == "heuristic"  # the dynamic one opens the SL plot
    assert recompute_for(get_method(fourteenth), perturbed_pair, {}) == "target+draft"
    step = explain_iteration(
        mine, 1, race.prompt_ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target+draft"
    )
    assert all(c.q_top for c in step.checks)
    assert get_method(fourteenth).short_label == "Fixed γ = 3 (toy)"  # no short_label given: its label
    table = summary_table({r.name: r.records for r in race.runs}, {r.name: r.label for r in race.runs})
    phone = race_tab.summary_pivot(race_tab.speedup_first(table))
    assert 'title="Fixed γ = 3 (toy)">Fixed γ = 3 (toy)</th>' in phone  # the phone's summary heads it so


def test_each_entry_names_itself_short_enough_for_a_phones_summary_column():
    """The phone's summary heads each method's column with its registry entry's short_label (~65 px)."""
    short = {s.name: s.short_label for s in all_methods()}
    assert short["autoregressive"] == "AR" and short["eagle"] == "EAGLE-2" and short["streaming"] == "Stream."
    assert all(len(label) <= 7 or " " in label for label in short.values())


def test_trees_and_pearl_are_explained_by_their_own_formulas(perturbed_pair):
    settings = RaceSettings(
        "def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)",
        ("autoregressive", "pearl", "sssd"),
        max_new_tokens=24,
        options={"pearl.window": 3},
    )
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())  # the race as it ends
    rows = {r["method"]: r for r in explain_race(race)}
    sssd, pearl = rows[get_method("sssd").label], rows[get_method("pearl").label]
    trees = [t for r in race.runs[2].records if (t := r.tree()) is not None and t.tree_tokens]
    assert sssd["family"] == "tree" and sssd["verify_label"] == "T(S+1)/T(1)"  # a pass over S nodes, not γ + 1 tokens
    assert sssd["length"] == pytest.approx(sum(len(t.tree_tokens) for t in trees) / len(trees))
    assert sssd["iteration_cost"] == pytest.approx(sssd["length"] * sssd["c"] + sssd["verify_ratio"])
    assert pearl["family"] == "parallel" and pearl["length"] == 3
    side_by_side = any(p.parallel for r in race.runs[1].records for p in r.pearl().phases)
    assert pearl["predicted_speedup"] == pytest.approx(
        pearl_speedup_with_verify_cost(pearl["alpha"], 3, pearl["c"], pearl["verify_ratio"], side_by_side)
    )
    why = why_markdown(race)
    assert "| parallel |" in why and "T(S+1) / T(1) = " in why and "tree: E[tokens](α, D)" in why


def test_a_tree_drafted_by_a_model_is_explained_by_its_passes(perturbed_pair):
    """EAGLE's head costs passes, not nodes (a pass expands a whole level): its family prices the drafting
    as P passes a tree of c steps each; an n-gram tree (SSSD), drafted by no model, is priced per node."""
    settings = RaceSettings(
        "def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)",
        ("autoregressive", "sssd", "eagle"),
        max_new_tokens=16,
        options={"eagle.depth": 3, "eagle.tree_nodes": 6},
    )
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())
    race = race.flagged({})  # the wording of an undisturbed run: this machine's load must not decide the test
    rows = {r["name"]: r for r in explain_race(race)}
    eagle, sssd = rows["eagle"], rows["sssd"]
    assert eagle["family"] == "head-drafted tree" and sssd["family"] == "tree" and "draft_passes" not in sssd
    # reading the kept features, then one pass per deeper level: depth 3 is at most 3 passes, not 6 nodes' worth
    assert 1 < eagle["draft_passes"] <= 3
    line = next(x for x in why_markdown(race).splitlines() if x.startswith("- **" + get_method("eagle").label))
    assert f"{eagle['draft_passes']:.1f} head passes×{eagle['c']:.3f} drafting" in line
    assert "head-drafted tree: E[tokens](α, D) / (Pc + T(S+1)/T(1))" in why_markdown(race)


def test_pearls_formula_with_a_measured_verify_cost_is_pearls_own_at_one_step():
    for alpha in (0.0, 0.4, 0.9, 1.0):
        for c_pearl, gamma in ((2.0, 2), (4.0, 4), (4.0, 6)):
            assert pearl_speedup_with_verify_cost(alpha, gamma, 1 / c_pearl, 1.0) == pytest.approx(
                pearl_speedup(alpha, c_pearl, gamma)
            )
    assert pearl_speedup_with_verify_cost(0.5, 4, 0.25, 1.0, side_by_side=False) == pytest.approx(
        pearl_tokens_per_step(0.5, 4) / 2.0
    )


def test_the_residual_is_one_function_and_the_step_through_shows_it(perturbed_pair, monkeypatch):
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.2, 0.6, 0.1, 0.1])
    assert torch.allclose(residual(p, q, 1), torch.tensor([0.75, 0.0, 0.25, 0.0]))  # norm(max(0, p − q))
    assert torch.allclose(residual(p, None, 0), torch.tensor([0.0, 0.6, 0.4, 0.0]))  # one-hot q: p without x
    assert torch.equal(residual(p, p, 0), p)  # p == q: no rejection can happen; p stands
    ids = specviz.encode_prompt(perturbed_pair, "def fibonacci(n):")
    records = list(specviz.run("vanilla", perturbed_pair, ids, max_new_tokens=24, temperature=1.0, seed=3))
    i = next(i for i, r in enumerate(records) if r.accepted < len(r.drafted) and len(r.emitted) > r.accepted)
    monkeypatch.setattr(
        "specviz.verify.residual",
        lambda p_n, q_n, x_n: torch.nn.functional.one_hot(torch.tensor(7), p_n.shape[-1]).float(),
    )
    step = explain_iteration(records, i, ids, {"temperature": 1.0}, pair=perturbed_pair, recompute="target+draft")
    assert step.target_role == "correction" and step.target_top[0][0] == 7 and len(step.target_top) == 1


def test_a_drafter_on_a_pair_without_a_draft_names_the_pair(perturbed_pair):
    """The runner refuses a drafting method on a pair without a draft; a library caller that builds
    the drafter itself gets the same kind of error, not an AttributeError from inside the cache."""
    from specviz.decoding import Decoding
    from specviz.errors import SpecvizError
    from specviz.sampling import SamplingConfig

    alone = perturbed_pair.with_draft(None, name="target alone")
    dec = Decoding(alone, [5, 17, 300], "vanilla", 8, SamplingConfig(), seed=0)
    with pytest.raises(SpecvizError, match="the pair 'target alone' has no draft model"):
        ModelDrafter(dec)
