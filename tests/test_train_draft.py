"""The draft-distillation CLI end to end on the tiny-random target: teacher text, a few steps of
forward KL, a resumed run, and a draft folder that loads and drafts losslessly."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

import specviz
from specviz.models.default import load_draft
from specviz.models.shards import load_shards, save_shards
from specviz.models.tiny import TINY_VOCAB, tiny_pair
from specviz.train import draft as train_draft
from specviz.train.teacher import logits_rows, read_records

PROMPTS = ["def add(a, b):", "Janet has 3 apples and buys 2 more.", "Write a haiku about rain.", "x = [1, 2, 3]",
           "Explain what a list is.", "How many legs has a spider?", "print('hi')", "Sort these numbers: 3 1 2"]


def cli(tmp_path, steps: int) -> list[str]:
    return [
        "--target", "tiny-random", "--prompts", str(tmp_path / "prompts.jsonl"), "--lines", "0:8",
        "--work", str(tmp_path / "work"), "--out", str(tmp_path / "draft"),
        "--teacher-prompts", "8", "--max-new-tokens", "12", "--gen-batch-size", "4",
        "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64",
        "--steps", str(steps), "--batch-size", "4", "--warmup", "2", "--val-every", "2", "--no-progress",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("train")
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    assert train_draft.main(cli(tmp_path, steps=4)) == 0
    first_log = (tmp_path / "work" / "train-draft.csv").read_text()
    assert train_draft.main(cli(tmp_path, steps=6)) == 0  # resumes at step 4 from the checkpoint
    return tmp_path, first_log


def test_teacher_text_keeps_the_targets_logits(trained):
    tmp_path, _ = trained
    records = read_records(tmp_path / "work" / "teacher_text.jsonl")
    assert len(records) == 8 and len({r["prompt_index"] for r in records}) == 8
    logits = logits_rows(tmp_path / "work" / "teacher_logits.f16", TINY_VOCAB)
    target = tiny_pair().target
    r = records[3]
    ids = torch.tensor([r["prompt_ids"] + r["output_ids"]])
    with torch.no_grad():
        p = target(input_ids=ids).logits[0, len(r["prompt_ids"]) - 1 : -1]  # [n, V]: what drew each answer token
    stored = torch.from_numpy(logits[r["logits_row"] : r["logits_row"] + len(r["output_ids"])].copy()).float()
    assert torch.allclose(p, stored, atol=2e-2)


def test_teacher_text_alone_for_a_datastore_keeps_no_logits(tmp_path):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    args = cli(tmp_path, steps=1)
    assert train_draft.main([*args, "--teacher-only", "--no-logits"]) == 0
    records = read_records(tmp_path / "work" / "teacher_text.jsonl")
    assert len(records) == 8 and all(r["output_ids"] and r["logits_row"] is None for r in records)
    assert (tmp_path / "work" / "teacher_logits.f16").stat().st_size == 0
    assert not (tmp_path / "draft").exists()  # stage 1 only
    with pytest.raises(specviz.SpecvizError, match="--teacher-only"):
        train_draft.main([*args, "--no-logits"])


def test_training_resumes_and_logs_every_step(trained):
    tmp_path, first_log = trained
    rows = list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert (tmp_path / "work" / "train-draft.csv").read_text().startswith(first_log)
    assert all(float(r["kl"]) > 0 for r in rows)


def test_written_draft_loads_and_drafts_losslessly(trained):
    tmp_path, _ = trained
    out = tmp_path / "draft"
    assert (out / "config.json").is_file() and (out / "MODEL_CARD.md").is_file()
    assert all(p.stat().st_size <= 20_000_000 for p in out.iterdir())
    draft = load_draft(out, torch.device("cpu"), torch.float32)
    assert draft.config.vocab_size == TINY_VOCAB and draft.config.num_hidden_layers == 1
    assert json.loads((out / "training.json").read_text())["result"]["step"] == 6
    pair = tiny_pair().with_draft(draft, name="tiny-distilled")
    ref = specviz.generate("autoregressive", pair, PROMPTS[0], max_new_tokens=20).summary
    got = specviz.generate("vanilla", pair, PROMPTS[0], max_new_tokens=20, speculation_length=3).summary
    assert got.output_ids == ref.output_ids and got.drafted > 0


def test_more_steps_start_a_new_schedule_and_export_only_writes_the_checkpoint(trained, tmp_path):
    src, _ = trained
    shutil.copytree(src / "work", tmp_path / "work")
    args = cli(tmp_path, steps=6)
    assert train_draft.main(args + ["--more-steps", "2", "--lr", "1e-3"]) == 0
    rows = list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert [float(r["lr"]) for r in rows[6:]] == [1e-3, 5.5e-4]  # cosine from 1e-3 over steps 6..8, no warm-up
    result = json.loads((tmp_path / "draft" / "training.json").read_text())["result"]
    assert result["step"] == 8 and result["phases"][-1]["phase_start"] == 6 and result["phases"][-1]["lr"] == 1e-3
    assert "steps 6-8" in (tmp_path / "draft" / "MODEL_CARD.md").read_text()
    shutil.rmtree(tmp_path / "draft")
    assert train_draft.main(args + ["--export-only"]) == 0
    assert len(list(csv.DictReader((tmp_path / "work" / "train-draft.csv").open()))) == 8  # no training
    assert json.loads((tmp_path / "draft" / "training.json").read_text())["result"]["step"] == 8
    assert load_draft(tmp_path / "draft", torch.device("cpu"), torch.float32).config.num_hidden_layers == 1


def test_forward_kl_is_zero_only_for_the_same_distribution():
    p = torch.randn(5, 11)
    kl, top1 = train_draft.kl_terms(p.clone(), p)
    assert torch.allclose(kl, torch.zeros(5), atol=1e-5) and top1.all()
    kl, _ = train_draft.kl_terms(torch.randn(5, 11), p)
    assert (kl > 0).all()


def test_shards_split_tensors_larger_than_a_file_and_put_them_back(tmp_path):
    state = {"embed.weight": torch.randn(100, 8), "norm.weight": torch.randn(8), "scalar": torch.tensor(3.0)}
    paths = save_shards(state, tmp_path, dtype=torch.float32, max_bytes=1000)  # 100 x 8 x 4 B = 3200 B
    assert len(paths) >= 4 and all(p.stat().st_size < 1000 + 600 for p in paths)  # + safetensors header
    back = load_shards(tmp_path)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
