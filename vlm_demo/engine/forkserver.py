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
from .processes import cpu_preload, engine_log_file, environment, has_gpu

PRELOAD = ("vlm_demo.engine.preload",)
"""What the forkserver imports before it forks anything (torch, vLLM's engine core, executor and CPU worker)."""

_lock = threading.Lock()


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
    if not enabled():
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
    """End the forkserver now (the app's stop: no process of ours outlives it). It would end on its own once this
    process and every engine process have ended, a moment after the app."""
    server = multiprocessing.forkserver._forkserver  # noqa: SLF001 - the stdlib keeps its forkserver there
    with _lock:
        if server._forkserver_pid is None:  # noqa: SLF001
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(server._forkserver_pid, signal.SIGKILL)  # noqa: SLF001
        server._stop()  # noqa: SLF001 - closes its pipe, reaps it, removes its socket
