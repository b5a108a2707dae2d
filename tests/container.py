"""The CPU image for the container test, built in the background from the session's start.

A fresh machine's build (the debootstrap base, Debian's packages, the lock's wheels copied from the host's uv cache,
the tiny model) takes about 3 minutes of mostly disk work; started as the session starts, niced to take only the CPU
and disk the other tests leave, it is ready by the time the container test, which runs last, needs it."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from .conftest import ARTIFACTS, ROOT

IMAGE = "localhost/vlm-demo:test"
BUILD_TIMEOUT_S = 1500.0
"""A fresh machine's build when nothing else runs: about 190 s here."""
SCRIPT = str(ROOT / "scripts/container.sh")


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
    """``podman ARGS`` with this machine's flags (``scripts/container.sh podman``)."""
    done = subprocess.run([SCRIPT, "podman", *args], capture_output=True, text=True, timeout=timeout)
    assert not check or done.returncode == 0, f"podman {' '.join(args)}: {done.returncode}\n{done.stderr[-3000:]}"
    return done


class Build:
    """``scripts/container.sh build IMAGE`` in the background (nice 19, idle I/O class), its log in test-artifacts."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.log: Path = ARTIFACTS / "container-build.log"
        self.t0 = 0.0
        self.took: float | None = None
        """Seconds from the build's start to its end, once it has ended."""

    def start(self) -> None:
        if self.proc is None:
            ARTIFACTS.mkdir(exist_ok=True)
            self.t0 = time.monotonic()
            with open(self.log, "wb") as out:
                self.proc = subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", SCRIPT, "build", IMAGE], cwd=ROOT,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            threading.Thread(target=self._timed, args=(self.proc,), name="container-build", daemon=True).start()

    def _timed(self, proc: subprocess.Popen) -> None:
        proc.wait()
        self.took = time.monotonic() - self.t0

    def wait(self) -> tuple[int, float, float]:
        """The build's exit status, the seconds it took and the seconds this call waited for it."""
        self.start()
        assert self.proc is not None
        t0 = time.monotonic()
        rc = self.proc.wait(timeout=BUILD_TIMEOUT_S)
        waited = time.monotonic() - t0
        while self.took is None:  # (the timing thread notes the end a moment after)
            time.sleep(0.01)
        return rc, self.took, waited

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


BUILD = Build()
