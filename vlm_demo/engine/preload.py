"""Imported by the engines' forkserver (``forkserver.py``) before it forks anything, and by nothing else: torch and
the vLLM modules an engine core and its CPU worker import, once for every engine this app starts; and the worker
forked from its engine core instead of spawned.

A forked worker shares its engine core's imports, but its OpenMP runtime read its settings (thread count, binding)
when torch was first imported, before vLLM set them in the environment for this worker (``OMPProcessManager``:
``OMP_NUM_THREADS``, ``OMP_PLACES``/``GOMP_CPU_AFFINITY``/``KMP_AFFINITY``). ``_ForkedWorker`` applies them as the
worker begins: torch's thread count, and the CPU set the worker's threads run on (its OpenMP threads, created later,
inherit it). With one thread, as on this 2-core machine, that is vLLM's own binding; with several, they share the
set instead of taking one CPU each. An engine process ends without collecting its whole heap first
(``_ending_without_collection``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing.context
import os
import re
from collections.abc import Iterator


def openmp_settings(environ: dict[str, str]) -> tuple[int | None, set[int] | None]:
    """The thread count and the CPUs vLLM asked for in ``environ`` (None where it says nothing)."""
    threads = int(environ["OMP_NUM_THREADS"]) if environ.get("OMP_NUM_THREADS", "").isdigit() else None
    places = environ.get("OMP_PLACES") or environ.get("GOMP_CPU_AFFINITY") or ""
    if not places and "proclist=" in environ.get("KMP_AFFINITY", ""):
        places = environ["KMP_AFFINITY"].split("proclist=", 1)[1]
    cpus = {int(n) for n in re.findall(r"\d+", places)}
    return threads, cpus or None


class _ForkedWorker(multiprocessing.context.ForkProcess):
    """vLLM's worker process, forked from its engine core, with the OpenMP settings vLLM gave it."""

    def run(self) -> None:
        threads, cpus = openmp_settings(dict(os.environ))
        if cpus:
            os.sched_setaffinity(0, cpus)
        if threads:
            import torch

            torch.set_num_threads(threads)
        super().run()


class _WorkerContext(multiprocessing.context.ForkContext):
    Process = _ForkedWorker


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """``gc.collect`` and ``gc.unfreeze`` do nothing inside (the process is on its way out)."""
    collect, unfreeze = gc.collect, gc.unfreeze
    gc.collect, gc.unfreeze = (lambda *args, **kwargs: 0), (lambda: None)
    try:
        yield
    finally:
        gc.collect, gc.unfreeze = collect, unfreeze


def _ending_without_collection(cls: type) -> None:
    """``cls.shutdown`` without its collections of the whole heap. vLLM 0.32's engine core (``EngineCore.shutdown``:
    ``gc.unfreeze()``, then ``cleanup_dist_env_and_memory``'s ``gc.collect()``) and its worker (``GPUModelRunner.
    shutdown``: ``_cleanup_profiling_kv_cache``'s ``gc.collect()``) collect every object on the way out, torch's and
    vLLM's imports included, "so that memory is reclaimable when running in the same process": in this app's engine
    processes, which end right after, that is 0.4-0.5 s of CPU each (py-spy) for nothing, about 0.9 s an engine, and
    an app stopped with four warm engines on a busy machine, its engines at the session's nice 19, ran past its grace
    and vLLM force-killed them. Their process ends and the system takes the memory back at once."""
    shutdown = cls.shutdown

    @functools.wraps(shutdown)
    def ending(self: object, *args: object, **kwargs: object) -> object:
        with _no_collection():
            return shutdown(self, *args, **kwargs)
    cls.shutdown = ending


def _fork_workers() -> None:
    import vllm.v1.executor.multiproc_executor as executor

    context = _WorkerContext()
    executor.get_mp_context = lambda: context


try:
    import torch  # noqa: F401
    import vllm.v1.engine.core  # noqa: F401
    import vllm.v1.executor.multiproc_executor  # noqa: F401
    import vllm.v1.worker.cpu_model_runner  # noqa: F401 - not cpu_worker: it patches torch for the worker alone

    _fork_workers()
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    _ending_without_collection(EngineCore)
    _ending_without_collection(GPUModelRunner)
except Exception:  # noqa: BLE001 - a forkserver whose preload raised would fork nothing; engines then start as spawned
    pass
