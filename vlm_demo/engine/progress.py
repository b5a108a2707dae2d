"""Where a starting engine stands (what the page shows while a person waits for it), and the states an engine is in."""

from __future__ import annotations

import dataclasses
import time
from typing import Literal

EngineState = Literal["not loaded", "loading", "ready"]


@dataclasses.dataclass(frozen=True)
class StartProgress:
    """Where a starting engine stands (what the page shows while a person waits for it)."""

    phase: str
    """What the start is doing now, in words ("downloading Qwen/Qwen2.5-VL-3B-Instruct", "starting vLLM's engine
    processes (weights, memory profiling)")."""
    since: float
    """When the start began (``time.monotonic()``)."""
    bytes_done: int = 0
    """Bytes fetched so far (a Hub download; 0 otherwise)."""
    bytes_total: int = 0
    """Bytes to fetch as known so far (a Hub download; 0 otherwise)."""

    @property
    def elapsed_s(self) -> float:
        """Seconds since the start began."""
        return time.monotonic() - self.since

    def text(self) -> str:
        """"starting vLLM's engine processes (weights, memory profiling) · 12 s" (with "· 1.2 of 6.0 GB" while
        downloading)."""
        fetched = (f" · {self.bytes_done / 1e9:.2f} of {self.bytes_total / 1e9:.2f} GB" if self.bytes_total
                   else "")
        return f"{self.phase}{fetched} · {self.elapsed_s:.0f} s"
