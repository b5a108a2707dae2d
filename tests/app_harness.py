"""The app under test and its API, for the tests that drive the real page: the page served over a service on a
free port, the ``/chat`` inputs for a question, a streamed call's outputs by name, waiting on a condition."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from gradio_client import Client, handle_file

from vlm_demo.engine import EngineManager
from vlm_demo.registry import Registry
from vlm_demo.service import ChatService
from vlm_demo.ui.app import build_app, launch_kwargs
from vlm_demo.ui.contract import api_inputs, named_outputs

from .conftest import ROOT, free_port
from .intake_servers import Internet

MODEL, OTHER = "tiny-qwen2.5-vl", "tiny-llava-1.5"
"""The page's model, and another (switching)."""


@dataclasses.dataclass
class App:
    """The running app under test."""

    url: str
    engines: EngineManager
    registry: Registry
    service: ChatService
    internet: Internet
    """The local stand-in for image hosts (URL fetching is on, for the test hosts only)."""

    def __iter__(self):  # url, engines, registry = app
        return iter((self.url, self.engines, self.registry))


def launch_app(env: dict[str, str], log: Path, up_s: float = 120) -> tuple[subprocess.Popen, str]:
    """``python app.py`` as a person runs it (its output in ``log``, a session of its own: the app lowers it itself,
    and a signal to it reaches its engines as a terminal's would) on a free port; once its page answers, the process
    and the page's URL."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + up_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return proc, url
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"the page did not come up in {up_s:.0f} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def page(service: ChatService):
    """The app's page over ``service``, served on a free 127.0.0.1 port; its URL while the block runs."""
    demo = build_app(service, default_model=MODEL)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_kwargs(service.settings, service))
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def message(text: str = "What is in this picture?", *pictures) -> dict:
    return {"text": text, "files": [handle_file(str(p)) for p in pictures]}


def chat_args(registry, picture, model=MODEL, text="What is in this picture?", max_tokens=24, seed=7, urls="",
              **controls):
    """The /chat inputs for one question (with ``picture`` unless None)."""
    return api_inputs(registry, "chat", model, message(text, *([picture] if picture else [])), temperature=0.7,
                      top_p=0.9, max_tokens=max_tokens, seed=seed, urls=urls, controls=controls)


def connect(url: str, deadline: float, gone: Callable[[], str | None]) -> Client:
    """A client of the page at ``url`` once it answers (tried each second until ``deadline``, a monotonic time);
    ``gone()`` says why the app can no longer come up (it exited: the test fails with that), None while it runs."""
    while True:
        why = gone()
        assert why is None, why
        try:
            return Client(url, verbose=False)
        except Exception:  # noqa: BLE001 - not listening yet
            assert time.monotonic() < deadline, "the page did not come up"
            time.sleep(1)


def wait_until(condition, timeout_s: float) -> None:
    """Poll ``condition`` every 50 ms until it holds or ``timeout_s`` passes (the caller asserts after)."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def named(*updates, api_name: str = "chat") -> dict:
    """The outputs as they stand after ``updates``: each output's last value that was not a no-op."""
    state: dict = {}
    for outputs in updates:
        for name, value in named_outputs(api_name, outputs).items():
            if not (isinstance(value, dict) and value.get("__type__") == "update"):
                state[name] = value
    return state


def run(job, client: Client | None = None) -> dict:
    """A streamed /chat or /retry call, run to its end: its outputs by name, with (given the client) the
    panels of the render it was generated from (``/panels``)."""
    out = named(*list(job), job.result(timeout=300))
    return out | (named_outputs("panels", client.predict(api_name="/panels")) if client else {})


def texts(chat: list) -> list[str]:
    """Each chat message's text (a user message's files left out)."""
    def text(content):
        if isinstance(content, str):
            return content
        parts = content if isinstance(content, list) else [content]
        return "".join(p if isinstance(p, str) else p.get("text", "") if p.get("type") == "text" else ""
                       for p in parts)
    return [text(m["content"]) for m in chat]


def prompt_text(out: dict) -> str:
    """The rendered prompt panel as plain text."""
    return html.unescape(re.sub(r"<[^>]+>", "", out["prompt"]))


def on_model(page, label: str) -> None:
    """The page (Playwright) with its picker on the model labelled ``label``, as a person picks it: a new tab opens
    on the model whose engine was used last."""
    picker = page.locator("#model input")
    picker.wait_for()
    page.wait_for_function("() => /engine:/.test(document.querySelector('#engine-state').innerText)")
    for _ in range(3):  # (the page's load event may still move the picker to the engine used last: pick again)
        if picker.input_value() != label:
            picker.click()
            page.get_by_role("option", name=label, exact=True).click()
        page.wait_for_function("l => document.querySelector('#engine-state').innerText.startsWith(l)", arg=label)
        page.wait_for_timeout(1000)
        if picker.input_value() == label:
            break
