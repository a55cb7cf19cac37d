"""vLLM's OpenAI-compatible server, started and read from outside (stdlib HTTP, no vllm import).

A server is started per configuration (model folder, speculative config, context) on a free loopback
port, waited for until `/health` answers, kept for later races and stopped when the process exits
(`SERVERS`). One completion is streamed by token ids (`stream`): each chunk's arrival time and
tokens, then vLLM's per-request counts (`--per-request-spec-decode-metrics detailed`: for every step
that verified drafts, how many it drafted and how many it accepted). vLLM does not report which ids
it drafted and rejected, nor p or q.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specviz.errors import SpecvizError
from specviz.paths import cache_dir

PYTHON_ENV = "SPECVIZ_VLLM_PYTHON"  # the python of an environment with vllm; default: the checkout's .venv-vllm
ARGS_ENV = "SPECVIZ_VLLM_ARGS"  # more `vllm serve` arguments for every server specviz starts, e.g. --enforce-eager
START_S_ENV = "SPECVIZ_VLLM_START_S"  # how long a server may take to start (default 900 s)
# vLLM's CPU backend: its KV cache in GiB, and its OpenMP threads bound to the cores, one core kept back for its
# scheduler process (on 2 cores: 1 thread); each left as the user set it
TP_ENV = "SPECVIZ_VLLM_TP"  # tensor-parallel ranks of every server specviz starts (default 1)
URLS_ENV = "SPECVIZ_VLLM_URLS"  # the app's --vllm-url items, comma-separated
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # what vLLM 0.32's CPU attention runs
INSTALL = (
    "vLLM is not installed here: `make vllm` builds its environment (about 2 minutes; vLLM runs in its own "
    f"process), or set {PYTHON_ENV} to a python with vllm, or give a running server with --vllm-url NAME=URL"
)
DETAILED = "start it with --per-request-spec-decode-metrics detailed (and --speculative-config)"
# vLLM's server, started through this line (Linux): it asks for SIGTERM when the thread that started it ends, so
# that a specviz killed without its exit handlers (SIGTERM, SIGKILL) leaves no server behind; elsewhere atexit only
LAUNCH = (
    "import ctypes, runpy, signal, sys\n"
    "if sys.platform == 'linux': ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "sys.argv[0] = 'vllm'; runpy.run_module('vllm.entrypoints.openai.api_server', run_name='__main__')"
)
_REPO = Path(__file__).resolve().parents[2]


def vllm_python() -> str:
    """The python that runs vLLM's server: $SPECVIZ_VLLM_PYTHON, else the checkout's .venv-vllm (`make vllm`)."""
    given = os.environ.get(PYTHON_ENV)
    python = Path(given) if given else _REPO / ".venv-vllm" / "bin" / "python"
    if not python.is_file():
        raise SpecvizError(INSTALL if not given else f"{PYTHON_ENV}={given} is not a file")
    return str(python)


def tensor_parallel() -> int:
    """$SPECVIZ_VLLM_TP: the ranks a server specviz starts splits the model over (vLLM's CPU backend: one core each)."""
    text = os.environ.get(TP_ENV, "1").strip()
    cores = len(os.sched_getaffinity(0))
    if not text.isdigit() or not 1 <= int(text) <= cores:
        raise SpecvizError(f"{TP_ENV} must be a whole number from 1 to this machine's {cores} cores, got {text!r}")
    return int(text)


def rank_cores(ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` CPU workers on one NUMA node: the allowed cores split evenly
    ("0|1" for two ranks on two cores). vLLM's "auto" binds a rank a NUMA node and keeps a core per rank for
    its scheduler: a 2-core, 1-node machine has none to give two ranks."""
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // ranks
    return "|".join(",".join(map(str, cores[r * share : (r + 1) * share])) for r in range(ranks))


@dataclass(frozen=True)
class ServerConfig:
    """What one server serves: the same config is the same server."""

    model: str  # a folder vLLM loads (or a hub id, on a machine that can download)
    served_name: str  # the name requests give as "model"
    max_model_len: int
    speculative_config: str = ""  # JSON for --speculative-config ("": the target alone)
    dtype: str = "float32"
    tensor_parallel_size: int = 1

    def command(self, python: str, port: int) -> list[str]:
        args = [python, "-c", LAUNCH, "--model", self.model]
        args += ["--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(port)]
        args += ["--dtype", self.dtype, "--max-model-len", str(self.max_model_len), "--max-num-seqs", "1"]
        args += ["--disable-uvicorn-access-log"]
        if self.speculative_config:
            args += ["--speculative-config", self.speculative_config, "--per-request-spec-decode-metrics", "detailed"]
        if self.tensor_parallel_size > 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        return args + shlex.split(os.environ.get(ARGS_ENV, ""))


def say_nothing(line: str) -> None:
    """A progress callback for a caller who shows none."""


@dataclass
class Server:
    url: str  # http://host:port
    served_name: str
    process: subprocess.Popen | None = None  # None: a server the user runs (--vllm-url)
    log: Path | None = None
    started_s: float | None = None  # seconds it took to answer /health
    checked: bool = False  # a user's server: it was found to serve the pair's target (`check_server`)

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def failure(self) -> str:
        """Why a server we started is gone: its exit code and the last error line of its log."""
        code = self.process.returncode if self.process is not None else None
        lines = self.log.read_text(errors="replace").splitlines() if self.log and self.log.is_file() else []
        errors = [ln for ln in lines if "rror" in ln and "errors.pydantic.dev" not in ln] or lines
        last = errors[-1].strip() if errors else "no log"
        return f"vLLM's server exited (code {code}): {last[-300:]} (log: {self.log})"

    def stop(self) -> None:
        """Its API server asked to end (it stops its engine), then its whole process group killed: an engine
        process left by a server that crashed or hung must not hold the cores and memory."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session (start_new_session): its group id is its pid
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


@dataclass
class Servers:
    """The servers this process started, one per config, kept until it exits; and the user's (by method)."""

    started: dict[ServerConfig, Server] = field(default_factory=dict)
    given: dict[str, Server] = field(default_factory=dict)  # method name -> a server the user runs
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, config: ServerConfig, progress: Callable[[str], None] = say_nothing) -> Server:
        """The running server for `config`, started (and waited for) when there is none; one that has exited is
        reported once as an error and started afresh by the next call."""
        with self._lock:
            server = self.started.get(config)
            if server is not None and not server.alive():
                del self.started[config]
                server.stop()  # what it left of its engine's processes
                raise SpecvizError(server.failure())
            if server is None:
                server = self.started[config] = start(config, progress)
            return server

    def give(self, method: str, url: str) -> None:
        """Serve `method` from a server the user runs (`--vllm-url`); `check_server` vets it on first use."""
        _connection(url, 1)  # a malformed URL fails now
        self.given[method] = Server(url=url.rstrip("/"), served_name="")

    def stop_all(self) -> None:
        with self._lock:
            for server in self.started.values():
                server.stop()
            self.started.clear()


SERVERS = Servers()
atexit.register(SERVERS.stop_all)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(config: ServerConfig, progress: Callable[[str], None]) -> Server:
    """Start vLLM's server for `config` and wait until it answers /health (its log under the cache)."""
    python, port = vllm_python(), free_port()
    logs = cache_dir() / "vllm" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{config.served_name}-{port}.log"
    env = {**CPU_ENV, **os.environ}
    if config.tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = rank_cores(config.tensor_parallel_size)
    with log.open("w") as out:
        process = subprocess.Popen(
            config.command(python, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # the terminal's Ctrl-C reaches specviz, which stops it (atexit)
        )
    server = Server(f"http://127.0.0.1:{port}", config.served_name, process, log)
    t0, most = time.monotonic(), float(os.environ.get(START_S_ENV, "900"))
    said = 0.0
    while True:
        waited = time.monotonic() - t0
        if process.poll() is not None:
            raise SpecvizError(server.failure())
        if _healthy(server.url):
            server.started_s = waited
            progress(f"vLLM is serving {config.served_name} (started in {waited:.0f} s)")
            return server
        if waited > most:
            server.stop()
            raise SpecvizError(f"vLLM's server did not start within {most:.0f} s ({START_S_ENV}); log: {log}")
        if waited - said >= 5:
            said = waited
            progress(f"starting vLLM for {config.served_name}: {waited:.0f} s (loading, then compiling)")
        time.sleep(0.5)


def _healthy(url: str) -> bool:
    try:
        status, _ = request(url, "GET", "/health", timeout=2)
    except (OSError, SpecvizError):
        return False
    return status == 200


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecvizError(f"a vLLM server's URL is http(s)://host:port, got {url!r}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(parts.hostname, parts.port, timeout=timeout), parts.path.rstrip("/")


def _headers() -> dict[str, str]:
    key = os.environ.get("VLLM_API_KEY")  # what `vllm serve --api-key` checks
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}


def request(url: str, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    """One plain HTTP call: (status, the JSON body, or the text where it is not JSON)."""
    conn, base = _connection(url, timeout)
    try:
        conn.request(method, base + path, json.dumps(body) if body is not None else None, _headers())
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
    finally:
        conn.close()
    try:
        return response.status, json.loads(text)
    except json.JSONDecodeError:
        return response.status, text


@dataclass(frozen=True)
class Chunk:
    t: float  # when it arrived (the caller's clock)
    tokens: tuple[int, ...]
    finish_reason: str | None


@dataclass(frozen=True)
class StepCounts:
    """vLLM's per-request counts (`metrics.speculative_decoding`): one entry per step that verified drafts."""

    accepted: tuple[int, ...]
    drafted: tuple[int, ...]


def stream(
    server: Server,
    prompt_ids: list[int],
    max_tokens: int,
    sampling: dict[str, Any],
    stop_ids: tuple[int, ...],
    seed: int,
    clock: Callable[[], float],
    timeout: float = 600,
) -> Generator[Chunk | StepCounts, None, None]:
    """Stream one completion: a Chunk as each network chunk arrives, then the per-step counts (when vLLM ran
    speculation and reports them). Generation stops at `stop_ids` (kept in the output) or after `max_tokens`.
    Closing the generator closes the connection, which makes vLLM abort the request."""
    body = {
        "model": server.served_name,
        "prompt": list(prompt_ids),
        "max_tokens": max_tokens,
        "temperature": sampling.get("temperature", 0.0),
        "top_p": sampling.get("top_p", 1.0),
        "top_k": sampling.get("top_k", 0) or -1,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "ignore_eos": True,  # the pair's own end-of-sequence ids stop it, as they stop specviz's methods
        "stop_token_ids": list(stop_ids),
        "skip_special_tokens": False,
    }
    conn, base = _connection(server.url, timeout)
    try:
        conn.request("POST", base + "/v1/completions", json.dumps(body), _headers())
        response = conn.getresponse()
        if response.status != 200:
            raise SpecvizError(f"vLLM refused the request ({response.status}): {_message(response.read())}")
        for raw in response:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            data = json.loads(line[5:])
            if "error" in data:
                raise SpecvizError(f"vLLM failed the request: {_message(data)}")
            for choice in data.get("choices") or ():
                yield Chunk(clock(), tuple(choice.get("token_ids") or ()), choice.get("finish_reason"))
            counts = (data.get("metrics") or {}).get("speculative_decoding")
            if counts is not None:
                if counts.get("num_spec_steps") and counts.get("per_step_accepted") is None:
                    raise SpecvizError(f"{server.url} reports no per-step counts: {DETAILED}")
                yield StepCounts(
                    tuple(counts.get("per_step_accepted") or ()), tuple(counts.get("per_step_drafted") or ())
                )
    except (OSError, http.client.HTTPException) as e:
        raise SpecvizError(f"lost vLLM's server at {server.url}: {e}") from None
    finally:
        conn.close()


def _message(payload: Any) -> str:
    if isinstance(payload, bytes):
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError:
            return payload.decode(errors="replace")[:300]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    return str(error.get("message", error) if isinstance(error, dict) else error)[:300]


def served_model(server: Server) -> str:
    """The first model a server serves (`/v1/models`)."""
    status, body = request(server.url, "GET", "/v1/models", timeout=10)
    models = body.get("data") if status == 200 and isinstance(body, dict) else None
    if not models:
        raise SpecvizError(f"{server.url} does not answer /v1/models as vLLM's server does ({status})")
    return str(models[0]["id"])


def check_server(server: Server, prompt_ids: list[int], expected: list[int], speculative: bool) -> None:
    """A server the user runs must serve the pair's target: its greedy tokens for `prompt_ids` are `expected`
    (the pair's own), and a speculative one reports its per-step counts. Raises SpecvizError otherwise."""
    try:
        server.served_name = server.served_name or served_model(server)
    except OSError as e:  # nothing listens there, or the network is down: one line, not a traceback
        raise SpecvizError(f"cannot reach the vLLM server at {server.url}: {e}") from None
    chunks: list[int] = []
    counts = None
    for item in stream(server, prompt_ids, len(expected), {"temperature": 0.0}, (), 0, time.perf_counter):
        if isinstance(item, Chunk):
            chunks += item.tokens
        else:
            counts = item
    if chunks != expected:
        raise SpecvizError(
            f"{server.url} serves {server.served_name}, whose greedy tokens are not this pair's target's "
            f"({chunks[:8]} against {expected[:8]}): give the URL of a server of the pair's target"
        )
    if speculative and counts is None:
        raise SpecvizError(f"{server.url} runs no speculation, or reports no per-step counts: {DETAILED}")


def urls_from_env() -> list[str]:
    return [item for item in os.environ.get(URLS_ENV, "").split(",") if item.strip()]
