"""The teacher corpus and the draft distilled from it, end to end on the tiny-random target:
batched generation that keeps the target's top-k, the shipped shard format, a few resumed training
steps, and a reduced-vocabulary draft folder that loads and drafts losslessly."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import torch

import specviz
from specviz.models.default import load_draft
from specviz.models.draft import ReducedVocabDraft
from specviz.models.shards import load_shards, save_shards
from specviz.models.tiny import TINY_VOCAB, tiny_pair
from specviz.train import corpus
from specviz.train import draft as train_draft

PROMPTS = {
    "sharegpt_prompts.jsonl": ("prompt", ["Write a haiku about rain.", "Explain what a list is.", "x = [1, 2, 3]"]),
    "gsm8k_train.jsonl": (
        "question",
        ["Janet has 3 apples and buys 2 more.", "How many legs has a spider?", "2 + 2 = ?"],
    ),
    "codealpaca_prompts.jsonl": ("prompt", ["def add(a, b):", "print('hi')", "Sort these numbers: 3 1 2"]),
}


def write_sources(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name, (field, texts) in PROMPTS.items():
        (folder / name).write_text("".join(json.dumps({field: t}) + "\n" for t in texts))


def generate_cli(tmp_path, *extra) -> list[str]:
    return [
        "generate",
        "--target",
        "tiny-random",
        "--data",
        str(tmp_path / "data"),
        "--work",
        str(tmp_path / "work"),
        "--corpus",
        "",
        "--dtype",
        "float32",
        "--max-new-tokens",
        "12",
        "--batch-size",
        "4",
        "--no-progress",
        *extra,
    ]


def train_cli(tmp_path, steps: int, *extra) -> list[str]:
    return [
        "--target",
        "tiny-random",
        "--data",
        str(tmp_path / "data"),
        "--corpus",
        str(tmp_path / "shipped"),
        "--work",
        str(tmp_path / "work"),
        "--out",
        str(tmp_path / "draft"),
        "--hidden",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--intermediate",
        "64",
        "--head-vocab",
        "384",
        "--embed-rank",
        "16",
        "--steps",
        str(steps),
        "--batch-tokens",
        "256",
        "--warmup",
        "2",
        "--val-every",
        "2",
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("corpus")
    write_sources(tmp_path / "data")
    assert corpus.main(generate_cli(tmp_path, "--limit", "10")) == 0
    assert corpus.main(generate_cli(tmp_path)) == 0  # resumes: the other 8 jobs
    assert corpus.main(["pack", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "shipped")]) == 0
    assert train_draft.main(train_cli(tmp_path, steps=4)) == 0
    first_log = (tmp_path / "work" / "train-draft.csv").read_text()
    assert train_draft.main(train_cli(tmp_path, steps=6)) == 0  # resumes at step 4 from the checkpoint
    return tmp_path, first_log


def test_every_prompt_is_answered_greedily_and_sampled_in_a_mixed_order():
    prompts = {s.name: dict.fromkeys(range(30), "p") for s in corpus.SOURCES}
    order = corpus.job_order(prompts)
    assert len(order) == len({j.key for j in order}) == 2 * 90
    first = order[:40]
    assert {j.source for j in first} == {s.name for s in corpus.SOURCES}
    assert sum(j.temperature == 0 for j in first) == 30  # three greedy jobs, then one sampled
    assert corpus.held_out("gsm8k", 7) == corpus.held_out("gsm8k", 7)


def test_batched_generation_keeps_the_targets_answers_and_top_k(built):
    tmp_path, _ = built
    work = corpus.WorkFolder(tmp_path / "work", corpus.GenerationConfig.top_k)
    assert len(work.records) == 18 and len({(r["source"], r["line"], r["temperature"]) for r in work.records}) == 18
    pair = tiny_pair()
    tok = pair.tokenizer
    ids, logp = work.topk()
    for r in work.records:
        text = PROMPTS[next(s.file for s in corpus.SOURCES if s.name == r["source"])][1][r["line"]]
        prompt = corpus.encode_chat(tok, text)
        if r["temperature"] == 0:  # batched, padded and shrinking: still the target's greedy answer
            ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=12).summary.output_ids
            assert r["output_ids"] == list(ref)
        with torch.no_grad():
            full = torch.log_softmax(pair.target(input_ids=torch.tensor([prompt + r["output_ids"]])).logits[0], -1)
        p = full[len(prompt) - 1 : -1]  # [n, V]: the distribution each answer token was drawn from
        n = len(r["output_ids"])
        top = torch.from_numpy(ids[r["row"] : r["row"] + n].astype(np.int64))
        assert torch.allclose(
            p.gather(1, top), torch.from_numpy(logp[r["row"] : r["row"] + n].astype(np.float32)), atol=2e-2
        )
        assert torch.equal(top[:, 0], p.argmax(-1))


def test_the_shipped_shards_hold_the_same_answers(built):
    tmp_path, _ = built
    local = {
        (r["source"], r["line"], r["temperature"]): r["output_ids"]
        for r in corpus.WorkFolder(tmp_path / "work", 32).records
    }
    shipped = corpus.load_shipped(tmp_path / "shipped")
    assert {(r["source"], r["line"], r["temperature"]): list(r["output_ids"]) for r in shipped} == local
    assert "18 answers" in (tmp_path / "shipped" / "README.md").read_text()
    assert len({id(r["output_ids"].base) for r in shipped}) == 1  # views of one array per shard, not a copy each
    assert corpus.main(["pack", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "shipped")]) == 0
    assert len(corpus.shard_paths(tmp_path / "shipped")) == 1  # nothing new: no second shard


def test_training_resumes_and_logs_every_step(built):
    tmp_path, first_log = built
    rows = list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert (tmp_path / "work" / "train-draft.csv").read_text().startswith(first_log)
    assert all(float(r["loss"]) > 0 for r in rows) and 0 <= float(rows[-1]["val_agree"]) <= 1


def test_a_stopped_run_resumes_to_the_weights_and_log_of_one_that_was_not(built, tmp_path, monkeypatch):
    """Checkpointing every step (--checkpoint-minutes 0), a run stopped in its fourth step and run
    again ends where an uninterrupted run ends: the same weights, the same log but for its seconds."""
    from specviz.train.draft import fit

    src, _ = built
    argv = {}
    for name in ("once", "stopped"):
        for sub in ("data", "shipped", "work"):  # the work folder's answers (top-k), not its run
            shutil.copytree(src / sub, tmp_path / name / sub, ignore=shutil.ignore_patterns("checkpoint-*", "train-*"))
        argv[name] = train_cli(tmp_path / name, 5, "--checkpoint-minutes", "0")

    class Stop(Exception):
        pass

    def stop_in_step_4(step, *args):
        if step == 3:
            raise Stop
        return position_in_epochs(step, *args)

    position_in_epochs = fit.position_in_epochs
    monkeypatch.setattr(fit, "position_in_epochs", stop_in_step_4)
    with pytest.raises(Stop):
        train_draft.main(argv["stopped"])
    monkeypatch.undo()
    assert train_draft.main(argv["stopped"]) == 0 and train_draft.main(argv["once"]) == 0
    once, again = (load_shards(tmp_path / name / "draft") for name in ("once", "stopped"))
    assert once.keys() == again.keys() and all(torch.equal(once[k], again[k]) for k in once)
    logs = [list(csv.DictReader((tmp_path / name / "work" / "train-draft.csv").open())) for name in ("once", "stopped")]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in logs[0]] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in logs[1]
    ]
    assert [int(r["step"]) for r in logs[1]] == [1, 2, 3, 4, 5]


def test_written_draft_loads_and_drafts_losslessly(built):
    tmp_path, _ = built
    out = tmp_path / "draft"
    assert (out / "config.json").is_file() and (out / "MODEL_CARD.md").is_file()
    draft = load_draft(out, torch.device("cpu"), torch.float32)
    assert isinstance(draft, ReducedVocabDraft) and draft.config.head_vocab == 384
    assert draft.lm_head.vocab_ids.dtype == torch.long and 0 in draft.lm_head.vocab_ids.tolist()  # EOS always drafted
    assert json.loads((out / "training.json").read_text())["result"]["step"] == 6
    pair = tiny_pair().with_draft(draft, name="tiny-distilled")
    prompt = PROMPTS["codealpaca_prompts.jsonl"][1][0]
    ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=20).summary
    got = specviz.generate("vanilla", pair, prompt, max_new_tokens=20, speculation_length=3).summary
    assert got.output_ids == ref.output_ids and got.drafted > 0


def test_training_on_shipped_answers_alone_and_continuing_from_a_draft(built, tmp_path):
    src, _ = built
    shutil.copytree(src / "data", tmp_path / "data")
    shutil.copytree(src / "shipped", tmp_path / "shipped")
    args = train_cli(tmp_path, 2, "--init", str(src / "draft"))  # no work folder: answer tokens only
    assert train_draft.main(args) == 0
    card = (tmp_path / "draft" / "MODEL_CARD.md").read_text()
    assert "0 training answers with the target's top-k" in card


def test_more_steps_start_a_new_schedule_and_export_only_writes_the_checkpoint(built, tmp_path):
    src, _ = built
    for name in ("data", "work", "shipped"):
        shutil.copytree(src / name, tmp_path / name)
    args = train_cli(tmp_path, steps=6)
    assert train_draft.main([*args, "--more-steps", "2", "--lr", "1e-3"]) == 0
    rows = list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert [float(r["lr"]) for r in rows[6:]] == [1e-3, 5.5e-4]  # cosine from 1e-3 over steps 6..8, no warm-up
    assert "steps 6-8" in (tmp_path / "draft" / "MODEL_CARD.md").read_text()
    shutil.rmtree(tmp_path / "draft")
    assert train_draft.main([*args, "--export-only"]) == 0
    assert len(list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))) == 8  # no training
    assert json.loads((tmp_path / "draft" / "training.json").read_text())["result"]["step"] == 8


def test_the_loss_is_cross_entropy_to_the_sparse_target():
    logits = torch.randn(3, 10)
    targets = torch.tensor([[4, 0], [2, 7], [9, 0]])
    weights = torch.tensor([[1.0, 0.0], [0.25, 0.75], [1.0, 0.0]])
    log_q = torch.log_softmax(logits, -1)
    expected = torch.stack([-log_q[0, 4], -(0.25 * log_q[1, 2] + 0.75 * log_q[1, 7]), -log_q[2, 9]])
    assert torch.allclose(train_draft.distillation_loss(logits, targets, weights), expected)
    q_best = torch.full((1, 10), -30.0)
    q_best[0, 2], q_best[0, 7] = np.log(0.25), np.log(0.75)  # q = p: the loss is p's entropy, its minimum
    near = train_draft.distillation_loss(q_best, targets[1:2], weights[1:2])
    assert near.item() == pytest.approx(-(0.25 * np.log(0.25) + 0.75 * np.log(0.75)), abs=1e-4)


def test_shards_split_tensors_larger_than_a_file_and_put_them_back(tmp_path):
    state = {
        "embed.weight": torch.randn(100, 8),
        "norm.weight": torch.randn(8),
        "scalar": torch.tensor(3.0),
        "head.vocab_ids": torch.arange(40000, 40100),
    }
    paths = save_shards(state, tmp_path, dtype=torch.float16, max_bytes=1000)  # 100 x 8 x 2 B = 1600 B
    assert len(paths) >= 3
    back = load_shards(tmp_path)
    assert back.keys() == state.keys()
    assert torch.equal(back["head.vocab_ids"], state["head.vocab_ids"])  # integers are not cast to float16
    assert torch.allclose(back["embed.weight"].float(), state["embed.weight"], atol=1e-2)


def test_a_draft_subcloned_from_every_layer_at_full_rank_is_the_target():
    target = tiny_pair().target
    draft = train_draft.subclone_draft(target, [0, 1, 2, 3], torch.arange(TINY_VOCAB), embed_rank=64).eval()
    ids = torch.tensor([[5, 17, 300, 42, 5, 17, 99]])
    with torch.no_grad():
        assert torch.allclose(draft(input_ids=ids).logits, target(input_ids=ids).logits, atol=1e-4)
    fewer = train_draft.subclone_draft(target, [0, 3], torch.arange(400), embed_rank=16)
    assert fewer.config.num_hidden_layers == 2 and fewer.config.hidden_size == target.config.hidden_size


def test_int8_shards_hold_matrices_to_a_quarter_of_a_step(tmp_path):
    torch.manual_seed(0)
    state = {"w": torch.randn(300, 64), "norm": torch.randn(64), "ids": torch.arange(10)}
    save_shards(state, tmp_path, int8=True)
    back = load_shards(tmp_path)
    assert back.keys() == state.keys() and torch.equal(back["ids"], state["ids"])
    step = state["w"].abs().amax(1, keepdim=True) / 127
    assert ((back["w"] - state["w"]).abs() <= 0.51 * step + 1e-3).all()  # rounding to the nearest level
    again = tmp_path / "again"
    again.mkdir()
    save_shards(back, again, int8=True)  # what the lean pass quantises again: the same levels
    assert torch.equal(load_shards(again)["w"], back["w"])


def test_the_speed_command_measures_each_batch_size(tmp_path, capsys):
    write_sources(tmp_path / "data")
    args = [
        "speed",
        "--target",
        "tiny-random",
        "--data",
        str(tmp_path / "data"),
        "--dtype",
        "float32",
        "--batch-sizes",
        "2,4",
        "--prompts",
        "6",
        "--max-new-tokens",
        "5",
    ]
    assert corpus.main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["batch_size"] for r in rows] == [2, 4] and all(r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in rows)


def test_teacher_text_puts_prompts_back_in_front_of_the_answers(built, tmp_path):
    src, _ = built
    to = tmp_path / "teacher_text.jsonl"
    args = [
        "teacher-text",
        "--target",
        "tiny-random",
        "--data",
        str(src / "data"),
        "--work",
        str(src / "work"),
        "--out",
        str(src / "shipped"),
        "--to",
        str(to),
        "--split",
        "all",
    ]
    assert corpus.main(args) == 0
    rows = [json.loads(line) for line in to.open()]
    assert len(rows) == 18 and len({r["prompt_index"] for r in rows}) == 9  # two answers per prompt
    tok = tiny_pair().tokenizer
    r = next(r for r in rows if r["source"] == "gsm8k" and r["line"] == 1)
    assert r["prompt_ids"] == corpus.encode_chat(tok, PROMPTS["gsm8k_train.jsonl"][1][1]) and r["output_ids"]


def test_agreement_breaks_down_the_drafts_top1_hits(built):
    """The breakdown tool's overall figure is the draft's argmax agreement with the target's argmax,
    recomputed here with the draft's ordinary forward pass; every breakdown covers every token."""
    from argparse import Namespace

    from specviz.experiments import agreement

    tmp_path, _ = built
    out = tmp_path / "agreement"
    args = [
        "--draft",
        str(tmp_path / "draft"),
        "--target",
        "tiny-random",
        "--data",
        str(tmp_path / "data"),
        "--corpus",
        str(tmp_path / "shipped"),
        "--work",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    assert agreement.main(args) == 0
    result = json.loads((out / "agreement.json").read_text())
    ns = Namespace(
        corpus=tmp_path / "shipped", work=tmp_path / "work", data=tmp_path / "data", top_k=32, answers_only=False
    )
    data = train_draft.CorpusData(ns, tiny_pair().tokenizer, 448)
    draft = load_draft(tmp_path / "draft", torch.device("cpu"), torch.float32).eval()
    hits = total = 0
    for e in data.val:
        with torch.no_grad():
            guess = draft(input_ids=torch.tensor([e.ids[:-1]])).logits[0, e.answer_start - 1 :].argmax(-1)  # [a]
        hits += int((guess == torch.from_numpy(e.topk[0][:, 0].astype(np.int64))).sum())
        total += len(guess)
    assert result["all"]["all"]["tokens"] == total and result["all"]["all"]["agreement"] == pytest.approx(hits / total)
    for group, rows in result.items():
        assert sum(r["tokens"] for r in rows.values()) == total, group
    assert "| position | 0–4 |" in (out / "agreement.md").read_text()


@pytest.mark.parametrize(
    "piece, kind",
    [
        ("Ġthe", "word start"),
        ("ing", "word piece"),
        ("Ċ", "space/newline"),
        ("ĠĠ", "space/newline"),
        ("123", "digit"),
        (".", "punctuation"),
        ("Ġ(", "punctuation"),
        ("x2", "mixed"),
    ],
)
def test_token_classes(piece, kind):
    from specviz.experiments.agreement import token_class

    assert token_class(piece) == kind
