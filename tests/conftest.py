"""Shared fixtures. Engines are the expensive part: one manager (one engine alive at a time) is
shared by the whole session, and tests that need the same model reuse its engine."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from PIL import Image, ImageDraw

from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry
from vlm_demo.registry import Registry
from vlm_demo.service import ChatService
from vlm_demo.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
# Engines kept warm: two in each manager (the tests' own, and each app a test starts), so the tests' engines,
# servers, apps and browsers stay within a 24 GiB machine (with four, a CI run's journeys app found 0.5 GiB free)
os.environ.setdefault("VLM_DEMO_ENGINES_MEMORY_GIB", "6")
os.environ.setdefault("VLM_DEMO_MAX_ENGINES", "2")


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def registry(settings: Settings) -> Registry:
    return load_registry(settings.models_file)


_SESSION_ENGINES: list[EngineManager] = []
"""The session's engine manager, once a test has asked for it (``release_session_engines``)."""


def release_session_engines() -> None:
    """Stop the session manager's engines (a later test's ``get`` starts them again, in seconds): a module that
    runs the app in its own process (the journeys) wants their memory."""
    for manager in _SESSION_ENGINES:
        manager.shutdown_all()


@pytest.fixture(scope="session")
async def engines(settings: Settings):
    manager = EngineManager(settings)
    _SESSION_ENGINES.append(manager)
    manager.warm()
    yield manager
    manager.shutdown_all()


@pytest.fixture(scope="session")
def kept_server():
    """One ``vllm serve`` kept across modules (``tests/vllm_server.py``'s ``KeptServer``), stopped at the end."""
    from .vllm_server import KeptServer

    kept = KeptServer()
    yield kept
    kept.stop()


@pytest.fixture(scope="session")
def renderer(registry: Registry, engines: EngineManager):
    """``renderer(name)``: vLLM's renderer for a registry model without an engine (built once a model)."""
    made: dict[str, object] = {}

    def get(name: str):
        if name not in made:
            made[name] = engines.start_renderer(registry.get(name))
        return made[name]
    return get


@pytest.fixture(scope="session")
def service(registry: Registry, engines: EngineManager, settings: Settings) -> ChatService:
    return ChatService(registry, engines, settings)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a page or a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command_line(proc: psutil.Process | int) -> str:
    """A process's command line, or "" once it has ended: a child listed a moment ago may be a zombie its parent has
    not reaped yet, or gone (psutil raises for either)."""
    try:
        return " ".join((psutil.Process(proc) if isinstance(proc, int) else proc).cmdline())
    except psutil.Error:
        return ""


def run_cli(*args: str, timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess:
    """``python -m vlm_demo ARGS`` from the repository, its output captured as text (``kwargs`` as
    ``subprocess.run``'s, over these): the one way the tests run the command line."""
    options = {"cwd": ROOT, "capture_output": True, "text": True, "timeout": timeout} | kwargs
    if "stdout" in kwargs or "stderr" in kwargs:
        options.pop("capture_output")
    return subprocess.run([sys.executable, "-m", "vlm_demo", *args], **options)


def data_url(data: bytes, media_type: str = "image/png") -> str:
    """``data`` as a ``data:`` URL of ``media_type`` (base64): the one way the tests make one."""
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def make_image(width: int, height: int, seed: int = 0) -> Image.Image:
    """A deterministic test picture: coloured bands and a diagonal."""
    image = Image.new("RGB", (width, height), (30 + seed * 40 % 200, 120, 200))
    draw = ImageDraw.Draw(image)
    for x in range(0, width, max(1, width // 8)):
        draw.rectangle([x, 0, x + width // 16, height], fill=(250, 200 - seed * 30 % 150, 40))
    draw.line([0, 0, width, height], fill=(0, 0, 0), width=5)
    return image


def make_clip_bytes(seconds: float, rate: int = 48_000, channels: int = 2, fmt: str = "WAV") -> bytes:
    """A deterministic test clip: a 440-Hz tone (a microphone's rate and channels by default)."""
    import io

    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 440 * t)
    out = io.BytesIO()
    sf.write(out, np.stack([wave] * channels, axis=1), rate, format=fmt, subtype="PCM_16" if fmt == "WAV" else None)
    return out.getvalue()


def make_clip(seconds: float, rate: int = 48_000, name: str = "talk.wav", settings: Settings | None = None):
    """``make_clip_bytes``'s clip through the app's intake (``intake.Audio``)."""
    from vlm_demo.intake import load_audio

    return load_audio(make_clip_bytes(seconds, rate), settings or Settings(), name=name)


@pytest.fixture(scope="session", autouse=True)
def _artifacts_dir():
    ARTIFACTS.mkdir(exist_ok=True)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


_REPORTS: list[str] = []


@pytest.fixture
def report():
    """``report(line)``: a figure measured by a test, printed in the summary at the end of the run."""
    return _REPORTS.append


def pytest_terminal_summary(terminalreporter):
    if _REPORTS:
        terminalreporter.section("measured")
        for line in _REPORTS:
            terminalreporter.write_line(line)


QUICK_MARKS = ("engine", "server", "browser")
"""What ``make check`` leaves out: a test marked with any of these starts a vLLM engine (here or in a process it runs),
a server (``vllm serve``, the app's page) or Chromium."""

CHECK = os.environ.get("VLM_DEMO_CHECK") == "1"
"""Set by ``make check``: a test it runs that starts an engine, a server or a browser fails, naming the mark it lacks
(so the quick loop stays quick and the marks stay true)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "last: run after every other test (the container test, whose image builds in "
                            "the background from the session's start)")
    for name in QUICK_MARKS:
        config.addinivalue_line("markers", f"{name}: starts a {name} (``make check`` leaves it out)")


@pytest.fixture(autouse=True)
def _quick_loop_guard(monkeypatch):
    """Under ``make check``: starting an engine, a server or a browser fails the test with the mark it needs."""
    if not CHECK:
        return

    def refuse(mark: str):
        def refused(*args, **kwargs):
            article = "an" if mark == "engine" else "a"
            raise AssertionError(f"this test starts {article} {mark}: mark it @pytest.mark.{mark} (make check leaves "
                                 "those out)")
        return refused
    import subprocess

    import gradio

    from . import browser, vllm_server

    monkeypatch.setattr("vlm_demo.engine.manager.start_engine", refuse("engine"))
    monkeypatch.setattr(vllm_server, "_launch", refuse("server"))
    monkeypatch.setattr(gradio.Blocks, "launch", refuse("server"))
    monkeypatch.setattr(browser, "chromium", refuse("browser"))
    popen = subprocess.Popen.__init__

    def checked(self, args, *rest, **kwargs):
        words = " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)
        if "app.py" in words or "vllm.entrypoints" in words or " chat " in f" {words} " or "bench/run.py" in words:
            refuse("engine" if " chat " in f" {words} " else "server")()
        popen(self, args, *rest, **kwargs)
    monkeypatch.setattr(subprocess.Popen, "__init__", checked)


FIXTURE_MARKS = {"app": ("engine", "server"), "long_answers": ("engine", "server"), "servers": ("engine", "server"),
                 "clean_log": ("browser",)}
"""What a test starts when it uses a fixture (directly or through another): marked so, whatever its module, so a pure
test beside such tests still runs in ``make check``."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Tests get the marks of the fixtures they use (``FIXTURE_MARKS``; before ``-m`` selects); tests marked ``last``
    go last (a stable sort: the rest keep their order)."""
    for item in items:
        for fixture, marks in FIXTURE_MARKS.items():
            if fixture in getattr(item, "fixturenames", ()):
                for mark in marks:
                    item.add_marker(getattr(pytest.mark, mark))
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


def pytest_collection_finish(session):
    """When the container test is selected, its image starts building now (``tests/container.py``)."""
    if not session.config.option.collectonly and any(item.get_closest_marker("last") for item in session.items):
        from .container import BUILD

        BUILD.start()


def pytest_sessionfinish(session, exitstatus):
    from .container import BUILD

    BUILD.stop()  # a session that ended before the container test (-x, Ctrl-C) leaves no build running
