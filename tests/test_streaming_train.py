"""The adapter trainer runs end to end on the tiny-random target, resumes, learns, and ships an
adapter that the `streaming` method loads."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import specviz
from specviz.models.streaming import load_adapter, read_adapter_meta
from specviz.models.tiny import TARGET_CONFIG, tiny_model
from specviz.models.tree_pruning import TreePruner
from specviz.train import streaming as train


def write_teacher_text(folder, records=6, answer=24):
    """Teacher text and logits from the tiny target, as the teacher sampler writes them."""
    model = tiny_model(seed=1, **TARGET_CONFIG)
    rows, lines = [], []
    gen = torch.Generator().manual_seed(0)
    for i in range(records):
        prompt = torch.randint(3, 512, (6,), generator=gen).tolist()
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(answer):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                rows.append(logits.numpy().astype(np.float16))
                ids.append(int(torch.multinomial(logits.softmax(-1), 1, generator=gen)))
        lines.append(
            {"prompt_index": i + 1, "prompt": "", "prompt_ids": prompt, "output_ids": ids[6:], "logits_row": i * answer}
        )
    (folder / "teacher_text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    np.stack(rows).tofile(folder / "teacher_logits.f16")
    return folder / "teacher_text.jsonl"


def test_train_resume_and_decode(tmp_path):
    data = write_teacher_text(tmp_path)
    out = tmp_path / "run"
    argv = [
        "--target",
        "tiny-random",
        "--data",
        str(data),
        "--out",
        str(out),
        "--stream-layers",
        "2",
        "--gamma",
        "3",
        "--lora-rank",
        "4",
        "--eta-rank",
        "4",
        "--save-every",
        "2",
        "--positions",
        "5",
        "--quiet",
    ]
    assert train.main([*argv, "--steps", "3"]) == 0
    assert train.main([*argv, "--steps", "5", "--ship", str(tmp_path / "tiny.safetensors")]) == 0  # resumes at 3
    assert train.main([*argv, "--export", "--ship", str(tmp_path / "again.safetensors")]) == 0
    shipped, again = (load_file(tmp_path / n) for n in ("tiny.safetensors", "again.safetensors"))
    assert shipped.keys() == again.keys() and all(torch.equal(shipped[k], again[k]) for k in shipped)
    assert read_adapter_meta(tmp_path / "again.safetensors") == read_adapter_meta(tmp_path / "tiny.safetensors")
    rows = list(csv.DictReader((out / "log.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5]
    assert all(np.isfinite(float(r["loss"])) for r in rows)
    pair = specviz.load_pair("tiny-random")
    ar = specviz.generate(
        "streaming",
        pair,
        [5, 17, 300],
        max_new_tokens=20,
        speculation_length=0,
        adapter=str(tmp_path / "tiny.safetensors"),
    )
    sd = specviz.generate(
        "streaming", pair, [5, 17, 300], max_new_tokens=20, adapter=str(tmp_path / "tiny.safetensors")
    )
    assert sd.summary.output_ids == ar.summary.output_ids


def test_training_continues_from_a_shipped_adapter(tmp_path):
    """--init starts a new run from an adapter's weights and counts on from its steps; the warm-up
    starts there too, and a resumed continued run keeps that origin; another shape is refused."""
    data = write_teacher_text(tmp_path)
    argv = ["--target", "tiny-random", "--data", str(data), "--stream-layers", "2", "--gamma", "3"]
    argv += ["--lora-rank", "4", "--eta-rank", "4", "--positions", "5", "--save-every", "1", "--quiet"]
    first = tmp_path / "first.safetensors"
    assert train.main([*argv, "--out", str(tmp_path / "a"), "--steps", "3", "--ship", str(first)]) == 0
    out = tmp_path / "b"
    assert train.main([*argv, "--out", str(out), "--steps", "4", "--init", str(first), "--lr", "0"]) == 0
    continued = load_file(out / "adapter.safetensors")
    assert all(torch.equal(t, continued[k]) for k, t in load_file(first).items())  # lr 0: the same weights
    assert [int(r["step"]) for r in csv.DictReader((out / "log.csv").open())] == [4]
    assert read_adapter_meta(out / "adapter.safetensors")["steps"] == "4"
    assert torch.load(out / "checkpoint.pt", weights_only=True)["origin"] == 3
    assert train.main([*argv, "--out", str(out), "--steps", "5", "--init", str(first)]) == 0  # resumes at 4
    assert torch.load(out / "checkpoint.pt", weights_only=True)["origin"] == 3
    pruned = tmp_path / "pruned.safetensors"  # an adapter with a pruner: continued and resumed, it keeps it
    lm = load_adapter(tiny_model(seed=1, **TARGET_CONFIG), first)
    lm.pruner = TreePruner(TARGET_CONFIG["hidden"], 1)
    lm.save_adapter(pruned, steps="3")
    kept = [*argv, "--out", str(tmp_path / "p"), "--init", str(pruned)]
    assert train.main([*kept, "--steps", "4"]) == 0 and train.main([*kept, "--steps", "5"]) == 0
    assert read_adapter_meta(tmp_path / "p" / "adapter.safetensors")["pruner_layer"] == "1"
    other = [a if a != "3" else "2" for a in argv]  # gamma 2: another shape
    with pytest.raises(SystemExit, match="train with the same shape"):
        train.main([*other, "--out", str(tmp_path / "c"), "--steps", "4", "--init", str(first)])


def test_streams_learn(tmp_path):
    """Forty steps on two records of the tiny target's own text: the first stream's top-1 agreement
    with its target rises (soft and hard targets) and the hard-target loss falls."""
    data = write_teacher_text(tmp_path, records=2)
    for hard in (False, True):
        cfg = train.TrainConfig(
            target="tiny-random",
            data=data,
            out=tmp_path / f"run{hard}",
            steps=40,
            lr=1e-2,
            warmup=0,
            hard=hard,
            streaming=train.StreamingConfig(stream_layers=2, gamma=2, lora_rank=4, eta_rank=4),
            save_every=100,
        )
        train.train(cfg, progress=False)
        rows = list(csv.DictReader((cfg.out / "log.csv").open()))
        first = {key: np.mean([float(r[key]) for r in rows[:5]]) for key in ("top1_1", "loss")}
        last = {key: np.mean([float(r[key]) for r in rows[-5:]]) for key in ("top1_1", "loss")}
        assert last["top1_1"] > first["top1_1"] + 0.15, (hard, first["top1_1"], last["top1_1"])
        if hard:
            assert last["loss"] < 0.7 * first["loss"]


def test_evaluate_held_out(tmp_path):
    """Held-out evaluation counts every answer position per stream; with a fresh adapter the main
    stream is the target itself, so it agrees with the target's own most likely token everywhere."""
    data = write_teacher_text(tmp_path, records=2, answer=10)
    examples = train.read_examples(data, 160, 96)
    cfg = train.TrainConfig(
        target="tiny-random",
        data=data,
        streaming=train.StreamingConfig(stream_layers=2, gamma=2, lora_rank=4, eta_rank=4),
    )
    lm = train.StreamingLM(train.load_target("tiny-random", "cpu"), cfg.streaming)
    report = train.evaluate(
        lm, examples, train.TeacherLogits(tmp_path / "teacher_logits.f16", lm.tuned.config.vocab_size), cfg
    )
    assert report["examples"] == 2
    assert [report[k]["positions"] for k in ("main", "stream1", "stream2")] == [
        20,
        18,
        16,
    ]  # 10 answer tokens: 10, 9, 8 per record
    assert report["main"]["top1"] == 1.0
    assert report["stream1"]["top1"] <= report["stream1"]["top3"] < 1.0


def test_streams_only_training_keeps_the_main_stream(tmp_path):
    """--streams-only: the trained LoRA moves the streams, the main stream stays the target, and
    the log has no main-stream loss."""
    data = write_teacher_text(tmp_path, records=2)
    out = tmp_path / "run"
    assert (
        train.main(
            [
                "--target",
                "tiny-random",
                "--data",
                str(data),
                "--out",
                str(out),
                "--stream-layers",
                "2",
                "--gamma",
                "2",
                "--lora-rank",
                "4",
                "--eta-rank",
                "4",
                "--steps",
                "6",
                "--lr",
                "1e-2",
                "--streams-only",
                "--quiet",
            ]
        )
        == 0
    )
    cfg, _ = train.parse_args(["--target", "tiny-random", "--data", str(data), "--out", str(out)])
    lm, ckpt = train.from_checkpoint(cfg)
    assert ckpt["streaming"]["lora_main"] is False
    lora_b = [p for n, p in lm.adapter_state().items() if n.endswith("lora_B")]
    assert lora_b and any(float(p.detach().abs().max()) > 0 for p in lora_b)  # trained, not zero
    ids = torch.tensor([[5, 17, 300, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(
            lm.tuned(input_ids=ids).logits, train.load_target("tiny-random", "cpu")(input_ids=ids).logits
        )
    rows = list(csv.DictReader((out / "log.csv").open()))
    assert rows[-1]["loss0"] == "" and rows[-1]["loss1"] != ""


def test_teacher_logits_without_their_file_cover_nothing_and_refuse_a_read(tmp_path):
    teacher = train.TeacherLogits(tmp_path / "teacher_logits.f16", 16)
    assert not teacher.covers(0, 1)
    with pytest.raises(ValueError, match="the file is absent"):
        teacher.probs(0, torch.arange(2))
