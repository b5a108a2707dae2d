"""Whether a model can start on this machine now, and if not why, in words: before anyone picks it (the picker's
notes and order) and before its start stops anything (a switch keeps the running engine when the new one cannot
start). Cheap: no engine, no renderer; the Hub is asked at most once a minute whether it answers."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import psutil

from .. import hub
from ..registry import ModelSpec
from ..settings import Settings
from .processes import has_gpu

HUB_CHECK_EVERY_S = 60.0
"""How long an answer of the Hub (it answers, or not) holds."""

ENGINE_OVERHEAD_GIB = 0.8
"""A CPU engine's memory besides its KV cache and weights: its two processes' own (measured with the tiny models:
about 0.2 GiB the core, 0.3 GiB the worker, proportional set sizes with the forkserver's pages shared)."""


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether a model can start here now."""

    runnable: bool
    """True when nothing known stops it from starting."""
    reason: str = ""
    """Why it cannot ("needs a GPU", "needs a download of 7.5 GB and the Hugging Face Hub cannot be reached"), or for
    a runnable one what its first start will do ("downloads 7.5 GB at its first start"); empty otherwise."""

    def note(self) -> str:
        """The picker's note after the model's name (empty for a runnable model that needs nothing)."""
        return f" — {self.reason}" if self.reason else ""


_hub_answer: tuple[float, bool] | None = None


def hub_reachable(settings: Settings) -> bool:
    """Whether the Hugging Face Hub answers now (asked at most every ``HUB_CHECK_EVERY_S``; never with
    ``HF_HUB_OFFLINE``)."""
    global _hub_answer
    now = time.monotonic()
    if _hub_answer is None or now - _hub_answer[0] > HUB_CHECK_EVERY_S:
        _hub_answer = (now, hub.reachable(min(settings.hub_timeout_s, 3.0)))
    return _hub_answer[1]


def forget_hub_answer() -> None:
    """Ask the Hub again at the next check (a test changes where it points)."""
    global _hub_answer
    _hub_answer = None


def weights_gib(spec: ModelSpec) -> float | None:
    """The checkpoint's weights in GiB where known: the files on disk (a directory, a cached snapshot), else the
    entry's ``download_gb``; None for a tiny model (random weights, a few MB)."""
    if spec.tiny:
        return None
    if spec.path:
        found = [p.stat().st_size for p in Path(spec.path).glob("*") if p.suffix in (".safetensors", ".bin")]
        return sum(found) / 2**30 if found else None
    cached = hub.cached_weights_bytes(spec.repo or "", spec.engine_args.revision) if spec.repo else None
    if cached:
        return cached / 2**30
    return spec.download_gb * 1e9 / 2**30 if spec.download_gb else None


def footprint_gib(spec: ModelSpec, settings: Settings) -> float:
    """What an engine of ``spec`` takes of this machine's memory before it runs (CPU: its KV cache, its weights
    where known, its processes' own; on a GPU, its share of the GPU's memory in GiB-free units: see
    ``gpu_share``)."""
    return settings.cpu_kv_cache_gib + (weights_gib(spec) or 0.0) + ENGINE_OVERHEAD_GIB


def gpu_share(spec: ModelSpec) -> float:
    """The share of the GPU's memory an engine of ``spec`` takes (its ``gpu_memory_utilization``; vLLM's default 0.9
    otherwise)."""
    return spec.engine_args.gpu_memory_utilization or 0.9


def availability(spec: ModelSpec, settings: Settings) -> Availability:
    """Whether ``spec`` can start here now, and why not (or what its first start will fetch)."""
    if spec.remote:
        return Availability(True)
    gpu = has_gpu()
    if spec.needs_gpu and not gpu:
        return Availability(False, "needs a GPU")
    if spec.path and not (Path(spec.path) / "config.json").is_file():
        return Availability(False, f"{spec.path} is not a model directory (no config.json there)")
    note = ""
    if spec.repo and not hub.is_cached(spec.repo, spec.engine_args.revision):
        size = f" of {spec.download_gb:g} GB" if spec.download_gb else ""
        if not hub_reachable(settings):
            return Availability(False, f"needs a download{size} and the Hugging Face Hub cannot be reached")
        note = f"downloads{size or ' its weights'} at its first start"
    if not gpu:
        need, free = footprint_gib(spec, settings), psutil.virtual_memory().total / 2**30
        if need > free:
            return Availability(False, f"does not fit memory: needs about {need:.1f} GiB, this machine has "
                                       f"{free:.1f} GiB")
    return Availability(True, note)
