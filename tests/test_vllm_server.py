"""The inspector against a real peer: vLLM's own OpenAI server, started for each tiny model with the
flags the app's engine gets, must tokenize the same conversation (images, slider kwargs) into exactly
the ids the inspector shows.

One server runs at a time (module-scoped, one per family) beside the session's one local engine, so
at most two engines are alive. Only 127.0.0.1 is contacted; the server runs offline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from PIL import Image

from vlm_demo.engine import EngineManager
from vlm_demo.registry import ModelSpec
from vlm_demo.service import ChatRequest, ChatService, Turn, to_openai_messages
from vlm_demo.settings import Settings

from .conftest import ARTIFACTS, make_image

START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Case:
    sizes: tuple[tuple[int, int], ...]
    """One image per size, all in the one user message."""
    mm_kwargs: dict[str, int]
    """Per-request slider values (merged over the model's defaults, as the app does)."""
    text: str = "What is in this picture?"


ONE_IMAGE = Case(((640, 480),), {})
CASES: dict[str, dict[str, Case]] = {
    # model -> {"default": one image, default sliders; "variant": two images, or a slider moved}
    "tiny-llava-1.5": {"default": ONE_IMAGE,
                       "variant": Case(((640, 480), (300, 900)), {}, "Compare the two pictures.")},
    "tiny-qwen2.5-vl": {"default": ONE_IMAGE, "variant": Case(((640, 480),), {"max_pixels": 200704})},
    "tiny-internvl2.5": {"default": ONE_IMAGE, "variant": Case(((640, 480),), {"max_dynamic_patch": 6})},
    # At 640x480 a 2x2 grid is best for max_partition 4 and 9 alike; at 1280x960, 9 gives 3x3.
    "tiny-ovis2": {"default": ONE_IMAGE, "variant": Case(((1280, 960),), {"max_partition": 4})},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _flag(key: str, value: object) -> list[str]:
    name = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [name if value else "--no-" + name[2:]]
    if isinstance(value, dict):
        return [name, json.dumps(value)]
    return [name, str(value)]


def engine_kwargs(spec: ModelSpec, settings: Settings) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` keyword arguments the app starts ``spec`` with."""
    return EngineManager(settings).engine_kwargs(spec)


def server_argv(spec: ModelSpec, model_dir: str, settings: Settings, port: int) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server`` arguments equivalent to the app's engine."""
    argv = ["--model", model_dir]
    for key, value in engine_kwargs(spec, settings).items():
        if value is not None:
            argv += _flag(key, value)
    argv += ["--trust-request-mm-kwargs", "--served-model-name", spec.name,
             "--host", HOST, "--port", str(port)]
    return argv


def data_url(image: Image.Image) -> str:
    """The image as a base64 PNG data URL (lossless: the server decodes the very pixels the app sends)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def served_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The app's own OpenAI messages for ``request``, with each decoded image as an ``image_url`` part."""
    messages = to_openai_messages(request)
    for message in messages:
        message["content"] = [
            {"type": "image_url", "image_url": {"url": data_url(part["image_pil"])}}
            if part.get("type") == "image_pil" else part
            for part in message["content"]
        ]
    return messages


@dataclass
class Server:
    spec: ModelSpec
    url: str
    proc: subprocess.Popen
    log: Path
    argv: list[str]

    def log_tail(self, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def _launch(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start the server in its own session (so its whole process group can be killed), logging to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", *argv],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
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
        os.killpg(proc.pid, signal.SIGKILL)  # anything started after the snapshot (own session)
    psutil.wait_procs(alive, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


async def _wait_ready(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=5.0) as client:
        while True:
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


# Parametrized here, not with pytest.param((model, case), indirect=...): pytest 9 sets a module-scoped
# fixture up again for every such param set, even with an equal value.
@pytest.fixture(scope="module", params=list(CASES))
async def server(request, registry, engines: EngineManager, settings: Settings):
    """vLLM's OpenAI server for the model named by the parameter, with the app's engine of that model.

    The server starts at once; meanwhile the app's other engines stop, then its engine for this
    model starts (two engines alive at most, start-ups overlapping)."""
    spec = registry.get(request.param)
    model_dir = engines.model_path(spec)
    port = free_port()
    argv = server_argv(spec, model_dir, settings, port)
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "*"}
    log = ARTIFACTS / f"vllm-server-{spec.name}.log"
    proc = await asyncio.to_thread(_launch, argv, env, log)
    srv = Server(spec, f"http://{HOST}:{port}", proc, log, argv)

    async def local_engine() -> None:
        for name in engines.loaded():
            if name != spec.name:
                await engines.shutdown(name)
        await engines.get(spec)

    try:
        # Both run to the end even if one fails: a local engine start cancelled half-way would leak.
        for result in await asyncio.gather(_wait_ready(srv), local_engine(), return_exceptions=True):
            if isinstance(result, BaseException):
                raise result
        yield srv
    finally:
        await asyncio.to_thread(_stop, proc)


@pytest.mark.parametrize("model", list(CASES))
def test_server_flags_give_the_apps_engine_args(model, registry, settings):
    """The command line parses (with vLLM's own parser) into the engine arguments the app uses."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec = registry.get(model)
    argv = server_argv(spec, "/models/x", settings, 8000)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    parsed = AsyncEngineArgs.from_cli_args(args)
    assert args.trust_request_mm_kwargs
    assert parsed.served_model_name == [spec.name]
    for key, value in engine_kwargs(spec, settings).items():
        assert getattr(parsed, key) == value, key


@pytest.mark.parametrize("kind", ["default", "variant"])
async def test_inspector_ids_equal_the_servers(server: Server, kind: str, service: ChatService):
    spec = server.spec
    case = CASES[spec.name][kind]
    images = tuple(make_image(w, h, seed=i) for i, (w, h) in enumerate(case.sizes))
    request = ChatRequest(model=spec.name, turns=(Turn("user", case.text, images),), mm_kwargs=case.mm_kwargs)
    inspection = await service.inspect(request)

    body: dict[str, Any] = {"model": spec.name, "messages": served_messages(request), "add_generation_prompt": True}
    mm_kwargs = {**spec.default_mm_kwargs(), **request.mm_kwargs}
    if mm_kwargs:
        body["mm_processor_kwargs"] = mm_kwargs
    served = await tokenize(server, body)

    ours = list(inspection.prompt_token_ids)
    theirs = served["tokens"]
    assert len(inspection.images) == len(images)
    image_id = inspection.images[0].token_id
    counts = [im.count for im in inspection.images]
    assert all(counts), counts
    assert theirs.count(image_id) == sum(counts) == ours.count(image_id)
    if ours != theirs:
        pairs = enumerate(zip(ours, theirs, strict=False))
        first = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
        pytest.fail(f"{spec.name}: inspector has {len(ours)} ids, server {len(theirs)}; first difference at "
                    f"{first}: ours {ours[first:first + 8]}, server's {theirs[first:first + 8]}")
    assert served["count"] == len(ours)
    assert served["max_model_len"] == inspection.budget.max_model_len
    if case.mm_kwargs:  # the moved slider took effect on the server too (not ignored on both sides)
        at_default = await tokenize(server, {**body, "mm_processor_kwargs": spec.default_mm_kwargs()})
        assert at_default["tokens"].count(image_id) != sum(counts)


async def tokenize(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=120.0) as client:
        response = await client.post("/tokenize", json=body)
    assert response.status_code == 200, f"{response.status_code}: {response.text}\n{server.log_tail()}"
    return response.json()
