"""What a stranger may send: limits in one place, one SpecvizError (or one CLI line) for every bad
input of the library, the app's race handler and the bench CLI, and quiet logs for user errors."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specviz
from specviz.errors import SpecvizError
from specviz.limits import MIN_TEMPERATURE, check_count, check_number
from specviz.serving.limits import AppLimits, app_limits
from specviz.serving.racing import RaceSettings, run_race


def test_app_limits_come_from_the_environment():
    assert app_limits({}) == AppLimits()
    limits = app_limits({"SPECVIZ_LIMIT_MAX_NEW_TOKENS": "1024", "SPECVIZ_LIMIT_SESSION_TTL_S": " 60 "})
    assert (
        limits.max_new_tokens == 1024
        and limits.session_ttl_s == 60
        and limits.prompt_tokens == AppLimits().prompt_tokens
    )
    with pytest.raises(SpecvizError, match="SPECVIZ_LIMIT_QUEUE_SIZE='many' is not a whole number"):
        app_limits({"SPECVIZ_LIMIT_QUEUE_SIZE": "many"})
    with pytest.raises(SpecvizError, match="SPECVIZ_LIMIT_SESSIONS must be positive"):
        app_limits({"SPECVIZ_LIMIT_SESSIONS": "0"})
    names = AppLimits.env_names()
    assert "SPECVIZ_LIMIT_OSD_REQUESTS" in names and "SPECVIZ_PRESETS_ONLY" in names
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in names), "the README's hosting section names every limit"


def test_the_readmes_hosting_section_states_the_fixed_bounds_the_code_holds():
    """Issue 41's caps that no environment variable changes, each with the value its code sets."""
    from specviz.models.pair import MEMORY_HEADROOM, MOST_OFFLINE_PAIRS
    from specviz.serving.janitor import CACHE_MOST_MB, JANITOR_EVERY_S
    from specviz.serving.limits import MOST_CHARS_PER_TOKEN
    from specviz.serving.saved import CHECK_BUDGET_S, MAX_FILE_BYTES
    from specviz.serving.turns import PER_VISITOR
    from specviz.ui.race import OWN_FILE_BYTES, OWN_SHOWN

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    hosting = readme.split("## Hosting publicly", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in hosting.splitlines() if line.startswith("| ")}
    assert f"at most {MAX_FILE_BYTES // 2**20} MB; gradio refuses" in rows["an upload (a saved race, a prompt file)"]
    assert (
        f"{CHECK_BUDGET_S:g} s of wall time" in rows["a saved race"] and "`concurrency_limit=1`" in rows["a saved race"]
    )
    assert (
        f"at most {OWN_FILE_BYTES // 2**20} MB, its first {OWN_SHOWN}"
        in rows["a prompt file (the Race tab's own prompts)"]
    )
    assert (
        f"{MOST_CHARS_PER_TOKEN} characters per allowed token ({MOST_CHARS_PER_TOKEN * 1024:,}"
        in rows["a prompt's text"]
    )
    assert f"{PER_VISITOR} places (`PER_VISITOR`)" in rows["one visitor's share of the models' line"]
    cache = rows["gradio's file cache (uploads, downloads handed out)"]
    assert f"`CACHE_MOST_MB` = {CACHE_MOST_MB}" in cache and f"every {JANITOR_EVERY_S:g} s" in cache
    assert f"1/{MEMORY_HEADROOM:g} of the memory free now" in rows["the pair list"]
    assert f"up to {MOST_OFFLINE_PAIRS} offline ones" in rows["loaded pairs"]
    assert "Gradio 6 cannot tie an upload to a session" in hosting


def test_a_space_takes_only_presets_unless_its_operator_allows_more():
    assert not app_limits({}).presets_only
    assert app_limits({"SPACE_ID": "someone/specviz"}).presets_only
    assert not app_limits({"SPACE_ID": "someone/specviz", "SPECVIZ_PRESETS_ONLY": "0"}).presets_only
    assert app_limits({"SPECVIZ_PRESETS_ONLY": "1"}).presets_only
    with pytest.raises(SpecvizError, match="SPECVIZ_PRESETS_ONLY must be 1 or 0"):
        app_limits({"SPECVIZ_PRESETS_ONLY": "yes"})


def test_presets_only_refuses_hub_ids_and_paths_before_loading_anything():
    from specviz.ui.pairs import pair_choices, resolve_pair

    allowed = tuple(pair_choices("default"))
    for name in ("someone/model,someone/draft", "/etc", "../assets/drafts"):
        with pytest.raises(SpecvizError, match="races only its listed pairs"):
            resolve_pair(name, allowed)
    pair, _ = resolve_pair("tiny-random", allowed)
    assert pair.name == "tiny-random"


@pytest.mark.parametrize(
    "value, message",
    [
        (True, "an integer"),
        (2.0, "an integer"),
        ("3", "an integer"),
        (None, "an integer"),
        (0, "from 1 to 64"),
        (65, "from 1 to 64"),
    ],
)
def test_check_count(value, message):
    with pytest.raises(SpecvizError, match=f"n must be {message}"):
        check_count("n", value)
    assert check_count("n", 64) == 64


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -0.5, 3.5, "1", None, True])
def test_check_number(value):
    with pytest.raises(SpecvizError, match="x must be"):
        check_number("x", value, 0.0, 3.0)
    assert check_number("x", 3, 0.0, 3.0) == 3.0


@pytest.mark.parametrize("temperature", [1e-45, 5e-324, MIN_TEMPERATURE / 2])
def test_a_temperature_below_the_floor_is_one_line_in_the_library_and_the_race(perturbed_pair, temperature):
    """Below the floor, logits / T overflows float32; once it crashed inside sampling with a traceback."""
    from specviz.sampling import SamplingConfig
    from specviz.ui.race import settings_from_widgets

    floor = r"temperature must be 0 \(greedy\) or at least 1e-30, got .*overflow float32"
    with pytest.raises(SpecvizError, match=floor):
        specviz.run("vanilla", perturbed_pair, "hi", max_new_tokens=4, temperature=temperature)
    with pytest.raises(SpecvizError, match=floor):
        SamplingConfig(temperature=temperature)  # what the step-through builds from a saved race's options
    with pytest.raises(SpecvizError, match=floor):  # the race's settings refuse it before any run
        settings_from_widgets("hi", ["autoregressive", "vanilla"], {}, 4, temperature, 1.0, 0)
    race_settings = RaceSettings("hi", ("autoregressive", "vanilla"), max_new_tokens=4, temperature=temperature)
    with pytest.raises(SpecvizError, match=floor):
        for _ in run_race(perturbed_pair, race_settings, {}, threading.Event(), AppLimits()):
            pass


def test_at_the_temperature_floor_sampling_stays_finite(perturbed_pair):
    """The floor leaves room: logits 10**6 times the default target's largest (47.4) stay finite."""
    import torch

    from specviz.sampling import SamplingConfig, probabilities

    logits = torch.tensor([[4.74e7, -4.74e7, 0.0, 4.7e7], [47.4, 47.4, -33.0, float("-inf")]])
    for cfg in (SamplingConfig(temperature=MIN_TEMPERATURE), SamplingConfig(temperature=MIN_TEMPERATURE, top_p=0.5)):
        probs = probabilities(logits, cfg)
        assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    for method in ("autoregressive", "vanilla", "pearl", "sssd"):
        records = list(specviz.run(method, perturbed_pair, "hi", max_new_tokens=6, temperature=MIN_TEMPERATURE))
        assert sum(len(r.emitted) for r in records) == 6


def test_a_user_error_is_one_info_line_and_a_fault_is_one_traceback(caplog):
    from specviz.ui.feedback import problem_text, user_error

    with caplog.at_level(logging.INFO, logger="specviz.app"):
        err = user_error(SpecvizError("the prompt is empty"))
        text = problem_text(ZeroDivisionError("boom"))
    assert err.message == "the prompt is empty" and err.print_exception is False
    assert "This is a bug" in text
    (info, error) = caplog.records
    assert (
        info.levelno == logging.INFO and info.getMessage() == "refused: the prompt is empty" and info.exc_info is None
    )
    assert error.levelno == logging.ERROR and error.exc_info is not None


# -- fuzzing ------------------------------------------------------------------------------------

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.lists(st.integers(-3, 3), max_size=2),
)
PROMPTS = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["abc\ud800", "", "  ", "def f(x):"]),
    st.lists(st.integers(-2, 600), max_size=12),
    ANY,
)
SMALL_COUNT = st.one_of(st.integers(-2, 10), ANY)  # valid values stay small, so every run is short
OPTION_KEYS = st.sampled_from(
    [
        "vanilla.speculation_length",
        "pearl.window",
        "pearl.concurrent",
        "sssd.sources",
        "sssd.datastore",
        "vanilla.nope",
        "nope.speculation_length",
        "speculation_length",
        "",
    ]
)
METHOD_OPTIONS = st.one_of(
    st.dictionaries(OPTION_KEYS, st.one_of(SMALL_COUNT, st.sampled_from(["both", "input"])), max_size=3), ANY
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    method=st.one_of(
        st.sampled_from(["autoregressive", "vanilla", "heuristic", "sssd", "prompt_lookup", "pearl", "disco"]), ANY
    ),
    prompt=PROMPTS,
    max_new_tokens=SMALL_COUNT,
    temperature=st.one_of(st.floats(0, 2), ANY),
    top_p=st.one_of(st.floats(0, 1), ANY),
    top_k=st.one_of(st.integers(-1, 5), ANY),
    seed=st.one_of(st.integers(0, 10), ANY),
    gamma=st.one_of(st.none(), SMALL_COUNT),
)
def test_the_library_runs_or_says_why(
    random_pair, method, prompt, max_new_tokens, temperature, top_p, top_k, seed, gamma
):
    options = {} if gamma is None else {"speculation_length": gamma}
    try:
        records = list(
            specviz.run(
                method,
                random_pair,
                prompt,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                seed=seed,
                **options,
            )
        )
    except SpecvizError as e:
        assert str(e).strip()
        return
    assert 1 <= sum(len(r.emitted) for r in records) <= max_new_tokens


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    prompt=PROMPTS,
    methods=st.one_of(st.lists(st.sampled_from(["autoregressive", "vanilla", "pearl", "nope"]), max_size=4), ANY),
    options=METHOD_OPTIONS,
    max_new=SMALL_COUNT,
    temperature=st.one_of(st.floats(0, 2), ANY),
    top_p=st.one_of(st.floats(0, 1), ANY),
    seed=st.one_of(st.integers(0, 10), ANY),
)
def test_the_race_handler_runs_or_says_why(perturbed_pair, prompt, methods, options, max_new, temperature, top_p, seed):
    """What the app's race API does with its inputs (the handler's own steps, without a server)."""
    from specviz.ui.race import settings_from_widgets

    try:
        race_settings = settings_from_widgets(prompt, methods, options, max_new, temperature, top_p, seed)
        *_, race = run_race(perturbed_pair, race_settings, {}, threading.Event(), AppLimits())
    except SpecvizError as e:
        assert str(e).strip()
        return
    assert all(r.status in ("done", "skipped") for r in race.runs), [(r.status, r.message) for r in race.runs]


# -- the bench CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message, after_load",
    [
        (["--methods", ""], "--methods names no method", False),
        (["--methods", "vanilla,vanilla"], "--methods lists vanilla more than once", False),
        (["--json", "/proc/specviz.json"], "cannot write /proc/specviz.json", False),
        (["--report", "/proc/specviz-report"], "cannot write /proc/specviz-report/results.json", False),
        (["--json", "."], "cannot write", False),
        (["--max-new-tokens", "0", "--no-warmup"], "--max-new-tokens must be at least 1, got 0", False),
        (["--max-new-tokens", "100000", "--no-warmup"], "max_new_tokens must be from 1 to", True),
        (["--methods", "sssd", "--option", "sssd.datastore=/etc/passwd"], "/etc/passwd is not a datastore", True),
        (["--methods", "sssd", "--option", "sssd.datastore=/etc"], "/etc is not a datastore", True),
        (
            ["--option", "sssd.speculation_length=99"],
            "--option 'sssd.speculation_length=99': 'sssd' is not among --methods",
            False,
        ),
        (
            ["--methods", "sssd", "--option", "sssd.speculation_length=99"],
            "speculation_length must be from 1 to 64, got 99",
            False,
        ),
        (["--methods", "sssd", "--option", "sssd.sources=all"], "sources must be one of both, input, datastore", False),
        (["--methods", "sssd", "--option", "sssd.learner=1"], "no option 'learner'", False),
        (["--methods", "pearl", "--option", "pearl.concurrent=maybe"], "concurrent must be true or false", False),
        (["--methods", "vanilla", "--option", "vanilla:gamma=3"], "write METHOD.NAME=VALUE", False),
        (
            ["--json", "/nonexistent/dir/x.json"],
            "cannot write /nonexistent/dir/x.json (No such file or directory)",
            False,
        ),
        (["--report", "/proc/x/report"], "cannot write /proc/x/report/results.json", False),
        (["--offset", "-5"], "--offset must be at least 0, got -5", False),
        (["--limit", "0"], "--limit must be at least 1, got 0", False),
        (["--repeats", "-1"], "--repeats must be at least 1, got -1", False),
        (["--max-new-tokens", "-5"], "--max-new-tokens must be at least 1, got -5", False),
        (["--temperature", "1e-45"], "--temperature must be 0 (greedy) or at least 1e-30, got 1e-45", False),
        (["--temperature", "nan"], "--temperature must be from 0 to 100, got nan", False),
        (["--top-p", "0"], "top_p must be in (0, 1]", False),
        (["--top-p", "2"], "top_p must be in (0, 1]", False),
        (["--seed", "-1"], "--seed (repeat r runs with seed + r) must be from 0 to", False),
        (["--seed", str(2**64)], "--seed (repeat r runs with seed + r) must be from 0 to", False),
        (["--seed", str(2**63 - 1), "--repeats", "2"], f"must be from 0 to {2**63 - 2}, got {2**63 - 1}", False),
        (["--speculation-length", "0"], "--speculation-length must be from 1 to 64, got 0", False),
        (["--speculation-length", "100000"], "--speculation-length must be from 1 to 64, got 100000", False),
    ],
)
def test_the_bench_cli_refuses_in_one_line(args, message, after_load, monkeypatch, capsys):
    """A bad flag is refused before any model loads (once `--json /nonexistent/dir/x.json` failed after
    the whole benchmark had run, `--offset -5` took the last five prompts, `--temperature 1e-45` crashed
    inside sampling); what needs the pair (its context, a datastore's tokenizer) right after it loads."""
    from specviz import bench
    from specviz.models import pair

    loads, load_pair = [], pair.load_pair
    monkeypatch.setattr(pair, "load_pair", lambda *a, **k: loads.append(a) or load_pair(*a, **k))
    code = bench.main(["--pair", "tiny-random", "--prompt", "hi", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert len(loads) == after_load
