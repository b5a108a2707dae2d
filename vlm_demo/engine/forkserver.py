"""Engine processes that begin with torch and vLLM already imported (CPU).

vLLM 0.32's CPU platform starts both processes of an engine with multiprocessing's ``spawn`` (its ``cpu.py`` sets
``VLLM_WORKER_MULTIPROC_METHOD=spawn``): the engine core, then its worker, each a new interpreter that imports torch
and vLLM again, 6-8 s apiece on a quiet 2-core machine and the bulk of an engine's start (docs/launch.md). Here:

- the engine core comes from a forkserver (``multiprocessing``'s own) that imported them once, ahead of need
  (``warm``, called as the app starts), as vLLM's own API server does when asked to
  (``VLLM_WORKER_MULTIPROC_METHOD=forkserver``, ``set_forkserver_preload``); each child takes the environment its
  parent had at ``start()`` (a forkserver's children otherwise get the forkserver's, from when it began);
- the engine core forks its worker (``preload.py``, run in the forkserver), as vLLM does on GPUs; the worker takes
  the OpenMP thread count and CPU binding vLLM set for it in its environment (``OMP_NUM_THREADS``, ``OMP_PLACES``),
  which a fresh interpreter's OpenMP runtime reads as it loads and a forked one read long before.

On a GPU nothing changes: vLLM forks there already. Only ``engine_processes()`` (around one engine's start) routes
vLLM's process start through here; nothing else of vLLM's is touched in this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing.context
import multiprocessing.forkserver
import os
import signal
import threading

from ..settings import Settings
from .processes import cpu_preload, engine_log_file, environment, has_gpu, shared_memory, unlink_shared_memory

PRELOAD = ("vlm_demo.engine.preload",)
"""What the forkserver imports before it forks anything (torch, vLLM's engine core, executor and CPU worker)."""

_lock = threading.Lock()
_stopped = False
"""Set by ``stop`` (the app's exit): no forkserver starts again."""


class _EnvironProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver child that runs with its parent's environment as it was at ``start()`` (vLLM passes settings to
    its processes that way: the platform's variables, the log configuration, the CPU preload)."""

    def start(self) -> None:
        self._environ = dict(os.environ)
        super().start()

    def run(self) -> None:
        # Changed keys only: replacing every variable moves the environment block, and setproctitle (vLLM's process
        # titles, "VLLM::EngineCore") then finds no room for a title.
        for key in set(os.environ) - set(self._environ):
            del os.environ[key]
        for key, value in self._environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        super().run()


class _Context(multiprocessing.context.ForkServerContext):
    Process = _EnvironProcess


CONTEXT = _Context()


def enabled() -> bool:
    """Whether engine processes start from the forkserver here (CPU; ``VLM_DEMO_FORKSERVER=0`` turns it off, for
    measuring the start vLLM gives)."""
    return os.environ.get("VLM_DEMO_FORKSERVER", "1") != "0" and not has_gpu()


def warm(settings: Settings) -> None:
    """Start the forkserver now, in the background (it imports torch and vLLM in its own process, 6-8 s), with the
    environment an engine's processes start with: the CPU preload (tcmalloc, which only a new interpreter can take)
    and the log file vLLM's processes also write to (read as vLLM's logger is imported). Returns at once; safe to
    call again (a forkserver that has ended is started again)."""
    if not enabled() or _stopped:
        return
    engine_log_file(settings)  # sets VLLM_LOGGING_CONFIG_PATH, which vLLM reads as the forkserver imports it
    with _lock, environment(cpu_preload()):
        multiprocessing.forkserver.set_forkserver_preload(list(PRELOAD))
        multiprocessing.forkserver.ensure_running()


@contextlib.contextmanager
def engine_processes(settings: Settings):
    """While an engine starts in this block (``AsyncLLM``), its engine core comes from the warm forkserver."""
    if not enabled():
        yield
        return
    import vllm.v1.engine.utils as engine_utils

    warm(settings)
    original = engine_utils.get_mp_context
    engine_utils.get_mp_context = lambda: CONTEXT
    try:
        yield
    finally:
        engine_utils.get_mp_context = original


def stop() -> None:
    """End the forkserver now, with any engine process it started that is still there (the app's stop: no process
    of ours outlives it). The engines the app knows have stopped by now; what is left is an engine caught in its
    start (a switch under way as the app stops), whose engine core, once the forkserver is gone, would live on
    under init with its worker (2 GiB, busy-waiting). The forkserver would end on its own once this process and
    every engine process have ended."""
    import psutil

    global _stopped
    server = multiprocessing.forkserver._forkserver  # noqa: SLF001 - the stdlib keeps its forkserver there
    with _lock:
        # An engine start still under way in its thread would start a forkserver again, for its engine core (the
        # stdlib's ensure_running, at each new process): it is refused from now on, and that start fails
        _stopped = True
        server.ensure_running = _refused
        pid = server._forkserver_pid  # noqa: SLF001
        if pid is None:
            return
        with contextlib.suppress(psutil.Error):
            starting = _frozen(psutil.Process(pid))
            segments = shared_memory(frozenset(p.pid for p in starting))
            for proc in starting:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            with contextlib.suppress(ProcessLookupError):  # (stopped, it would not reap them: init does)
                os.kill(pid, signal.SIGKILL)
            psutil.wait_procs(starting, timeout=5)
            unlink_shared_memory(segments)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        server._stop()  # noqa: SLF001 - closes its pipe, reaps it, removes its socket


def _frozen(root):
    """The processes below ``root`` (a list of ``psutil.Process``), each stopped (SIGSTOP) with ``root`` before
    they are listed, again until a listing finds no new one: none forks another after its listing (an engine core
    asked the forkserver for its worker just as the app stopped, and the worker, forked after the listing, lived
    on under init)."""
    import time

    import psutil

    found: dict[int, psutil.Process] = {}
    todo = [root]
    while todo:
        for proc in todo:
            with contextlib.suppress(psutil.Error):
                proc.suspend()
        deadline = time.monotonic() + 1.0  # (the signal is delivered, not yet acted on, when kill returns)
        for proc in todo:
            with contextlib.suppress(psutil.Error):
                while proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) and \
                        time.monotonic() < deadline:
                    time.sleep(0.005)
        children: dict[int, psutil.Process] = {}
        for proc in [root, *found.values()]:
            with contextlib.suppress(psutil.Error):
                children |= {c.pid: c for c in proc.children(recursive=True)}
        todo = [c for pid, c in children.items() if pid not in found]
        found |= {c.pid: c for c in todo}
    return list(found.values())


def _refused() -> None:
    from ..errors import EngineStartError

    raise EngineStartError("the app is stopping: no engine starts now")
