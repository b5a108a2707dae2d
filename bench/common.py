"""Pieces the benchmark's processes share: the load, the users' arguments and loop, the pictures, percentiles and
the machine's name."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

#: The tiny models measured, by registry name, with the family (for the transformers baseline).
MODELS = {"tiny-llava-1.5": "llava", "tiny-qwen2.5-vl": "qwen2_5_vl"}
QUESTION = "Describe this picture in detail."
IMAGE_SIZE = (640, 480)


@dataclass(frozen=True)
class Load:
    """One measured load: ``streams`` concurrent users, each asking ``per_stream`` questions back to back."""

    streams: int
    per_stream: int
    max_tokens: int
    """Tokens every answer has (``ignore_eos``)."""


def users_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of each users module (``bench.gradio_load``, ``bench.browser_load``, ``bench.serve_load``)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True, help="the model's registry (and served) name")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--per-user", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--picture", required=True)
    return p


async def run_users(ask: Callable[[], Awaitable[tuple[float, int]]], users: int, per_user: int,
                    expected: tuple[type[Exception], ...]) -> dict:
    """``users`` coroutines, each awaiting ``ask()`` (time to first text, tokens) ``per_user`` times back to
    back; errors of the ``expected`` kinds are counted, not raised. The load's figures and the users' own CPU."""
    runs: list[tuple[float, int]] = []
    errors: list[str] = []

    async def user() -> None:
        for _ in range(per_user):
            try:
                runs.append(await ask())
            except expected as exc:
                errors.append(repr(exc)[:300])

    t0, cpu0 = time.perf_counter(), os.times()
    await asyncio.gather(*(user() for _ in range(users)))
    wall = time.perf_counter() - t0
    cpu = os.times()
    return {"users": users, "wall_s": wall, "ttft_s": [r[0] for r in runs], "tokens": sum(r[1] for r in runs),
            "requests": len(runs), "errors": errors, "cpu_s": cpu.user + cpu.system - cpu0.user - cpu0.system}


def shows_answer(chat: Any) -> bool:
    """Whether the chat output (a list of messages) ends in answer text: its last message is the assistant's and
    holds text. Gradio sends each message's content as a list of parts, and an answer not begun yet (the update
    after the render) as one empty text part, which is not answer text."""
    if not isinstance(chat, list) or not chat or not isinstance(chat[-1], dict) or chat[-1].get("role") != "assistant":
        return False
    content = chat[-1].get("content")
    if isinstance(content, str):
        return bool(content)
    parts = content if isinstance(content, list) else [content]
    return any(isinstance(part, dict) and part.get("type") == "text" and part.get("text") for part in parts)


@dataclass
class Result:
    """Figures of one load on one path."""

    path: str
    """raw, service, gradio, browser, serve or transformers."""
    model: str
    streams: int
    requests: int
    tokens: int
    wall_s: float
    ttft_s: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("ttft_s")
        return {**d, "tokens_per_s": round(self.tokens_per_s, 3), "ttft_p50_s": round(pct(self.ttft_s, 50), 4),
                "ttft_p95_s": round(pct(self.ttft_s, 95), 4)}


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation), 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else max(values)


def picture(i: int) -> Image.Image:
    """Request ``i``'s image: 640x480, different per request (so no two requests share a processed image)."""
    w, h = IMAGE_SIZE
    image = Image.new("RGB", (w, h), ((37 * i) % 256, (91 * i) % 256, (53 * i + 120) % 256))
    draw = ImageDraw.Draw(image)
    for x in range(0, w, 40):
        draw.rectangle([x, 0, x + 12, h], fill=((17 * i + x) % 256, 200, 40))
    draw.line([0, 0, w, h], fill=(0, 0, 0), width=5)
    draw.text((20, 20), f"request {i}", fill=(255, 255, 255))
    return image


def write_pictures(folder: Path, n: int) -> list[Path]:
    """``n`` request images as PNG files (what the Gradio users upload)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"request-{i}.png"
        if not path.exists():
            picture(i).save(path)
        paths.append(path)
    return paths


def machine() -> dict:
    """The machine's name in figures: CPU model, cores, memory, load."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "load_average": [round(x, 2) for x in os.getloadavg()]}
