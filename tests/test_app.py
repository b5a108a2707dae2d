"""The real Gradio app with tiny models, driven through its HTTP API with gradio_client:
streaming with the three panels, Stop, inspect-only sliders, model switching and its policy."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
import socket
import time

import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from vlm_demo.engine import EngineManager
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatService
from vlm_demo.ui import build_app, launch_kwargs

from .conftest import ARTIFACTS, make_image

MODEL, OTHER = "tiny-qwen2.5-vl", "tiny-llava-1.5"
CHROMIUM = "/usr/bin/chromium"
CHAT_OUTPUTS = ["prompt", "runs", "table", "gallery", "budget", "chat", "stats", "box", "engine_state",
                "export_json", "export_curl", "export_py"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app(registry, settings, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
        app_settings = dataclasses.replace(settings, switch_wait_s=1.0)
        engines = EngineManager(app_settings)
        demo = build_app(ChatService(registry, engines, app_settings), default_model=MODEL)
        port = free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                    **launch_kwargs(app_settings))
        yield f"http://127.0.0.1:{port}/", engines, registry
        demo.close()
        engines.shutdown_all()


@pytest.fixture(scope="module")
def picture():
    path = ARTIFACTS / "app-test.png"
    make_image(1600, 400).save(path)
    return path


def slider_values(registry, model: str, **overrides) -> list[int]:
    """Values for every slider of the page (hidden ones keep a valid value the model ignores)."""
    defaults = {s.kwarg: s.default for spec in reversed(registry.models) for s in spec.sliders}
    defaults |= registry.get(model).default_mm_kwargs()
    return [overrides.get(k, defaults[k]) for k in sorted(defaults)]


def chat_args(registry, picture, model=MODEL, text="What is in this picture?", max_tokens=24, seed=7, **sliders):
    message = {"text": text, "files": [handle_file(str(picture))]}
    return [message, [], model, "", 0.7, 0.9, max_tokens, seed, *slider_values(registry, model, **sliders)]


def named(*updates) -> dict:
    """The outputs as they stand after ``updates``: each output's last value that was not a no-op."""
    state: dict = {}
    for outputs in updates:
        for name, value in zip(CHAT_OUTPUTS, outputs, strict=True):
            if not (isinstance(value, dict) and value.get("__type__") == "update"):
                state[name] = value
    return state


def test_streams_an_answer_with_the_three_panels(app, picture):
    url, engines, registry = app
    client = Client(url, verbose=False)
    job = client.submit(*chat_args(registry, picture), api_name="/chat")
    updates = list(job)
    out = named(*updates, job.result())
    assert len(updates) >= 3, "the answer should stream in several updates"
    assert "content format: <b>openai</b>" in out["prompt"]
    assert "&lt;|vision_start|&gt;&lt;|image_pad|&gt;&lt;|vision_end|&gt;" in out["prompt"]
    assert "<|image_pad|>x" in out["runs"]
    rows = out["table"]["data"]
    assert len(rows) == 1 and rows[0][3] > 0  # image tokens
    assert len(out["gallery"]) == 1
    assert "tokens: image" in out["budget"]
    assert out["chat"][-1]["role"] == "assistant" and out["chat"][-1]["content"]
    assert "tokens/s" in out["stats"] and "time to first token" in out["stats"]
    assert '"mm_processor_kwargs"' in out["export_json"] and "--trust-request-mm-kwargs" in out["export_curl"]
    assert engines.running_requests() == 0


def test_stop_aborts_the_engine_request(app, picture):
    url, engines, registry = app
    client = Client(url, verbose=False)
    job = client.submit(*chat_args(registry, picture, max_tokens=2048, seed=1), api_name="/chat")
    deadline = time.monotonic() + 120
    while engines.running_requests() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engines.running_requests() == 1, "generation should be running"
    time.sleep(0.3)
    job.cancel()
    deadline = time.monotonic() + 15
    while engines.running_requests() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engines.running_requests() == 0


def test_inspect_only_follows_the_slider(app, picture):
    url, engines, registry = app
    client = Client(url, verbose=False)
    message = {"text": "Count the shops.", "files": [handle_file(str(picture))]}
    counts = []
    for max_pixels in (100352, 401408):
        out = client.predict(message, MODEL, "", *slider_values(registry, MODEL, max_pixels=max_pixels),
                             api_name="/inspect")
        counts.append(out[2]["data"][0][3])
    assert counts[0] < counts[1]


def test_bad_upload_is_a_clear_error_and_nothing_breaks(app, tmp_path, picture):
    url, engines, registry = app
    fake = tmp_path / "notes.png"
    fake.write_text("this is not an image")
    client = Client(url, verbose=False)
    args = chat_args(registry, fake)
    with pytest.raises(AppError, match="not an image"):
        client.predict(*args, api_name="/chat")
    job = client.submit(*chat_args(registry, picture), api_name="/chat")
    out = named(*list(job), job.result())
    assert out["chat"][-1]["content"]


def resend(history: list) -> list:
    """A chat history as the API returned it, made fit to send back (files need their meta tag)."""
    def part(p):
        if isinstance(p, dict) and p.get("type") == "file":
            file = p["file"] if isinstance(p["file"], dict) else {"path": p["file"]}
            return {**p, "file": {**file, "meta": {"_type": "gradio.FileData"}}}
        return p
    return [{**m, "content": [part(p) for p in m["content"]]} if isinstance(m["content"], list) else m
            for m in history]


def test_retry_undo_and_compare(app, picture):
    url, engines, registry = app
    client = Client(url, verbose=False)
    sampling = [0.7, 0.9, 16, -1, *slider_values(registry, MODEL)]
    job = client.submit(*chat_args(registry, picture), api_name="/chat")
    history = named(*list(job), job.result())["chat"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    job = client.submit(resend(history), MODEL, "", *sampling, api_name="/retry")
    retried = named(*list(job), job.result())
    assert [m["role"] for m in retried["chat"]] == ["user", "assistant"] and "tokens/s" in retried["stats"]
    job = client.submit({"text": "And the colours?", "files": []}, resend(retried["chat"]), MODEL, "", *sampling,
                        api_name="/chat")
    longer = named(*list(job), job.result())
    assert len(longer["chat"]) == 4
    prompt = html.unescape(re.sub(r"<[^>]+>", "", longer["prompt"]))
    assert prompt.count("<|im_start|>user") == 2 and prompt.count("<|im_start|>assistant") == 2
    undone = client.predict(resend(longer["chat"]), api_name="/undo")
    assert len(undone) == 2
    message = {"text": "Count the shops.", "files": [handle_file(str(picture))]}
    a, _, b, _ = client.predict(message, MODEL, '{"max_pixels": 100352}', MODEL, '{"max_pixels": 401408}',
                                api_name="/compare")
    image_tokens = [int(x.split("tokens: image ")[1].split(" ")[0].replace(",", "")) for x in (a, b)]
    assert image_tokens[0] < image_tokens[1]
    with pytest.raises(AppError, match="settings must be JSON"):
        client.predict(message, MODEL, "{oops", MODEL, "{}", api_name="/compare")


def test_in_a_real_browser(app, picture):
    """Chromium (Debian's, headless): upload, ask, watch the answer stream, move a slider."""
    from playwright.sync_api import sync_playwright

    url, engines, registry = app
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.goto(url)
        page.locator("#question input[type=file]").set_input_files(str(picture))
        page.locator("#sampling").get_by_text("Sampling").click()
        page.locator("#seed input").fill("1")  # a seed whose (random-weight) answer runs long
        page.locator("#question textarea").fill("What is written on the signs?")
        page.wait_for_timeout(500)
        page.evaluate("""() => {
            window.answerLengths = [];
            new MutationObserver(() => {
                const bots = document.querySelectorAll('#chat .bot');
                if (bots.length) window.answerLengths.push(bots[bots.length - 1].innerText.length);
            }).observe(document.querySelector('#chat'), {subtree: true, childList: true, characterData: true});
        }""")
        page.locator("#question textarea").press("Enter")
        page.wait_for_function("document.querySelector('#stats').innerText.includes('tokens/s')", timeout=120_000)
        lengths = sorted({n for n in page.evaluate("window.answerLengths") if n > 0})
        assert len(lengths) >= 2, f"the answer did not stream in: {lengths}"
        before = page.locator("#budget-text").inner_text()
        track = page.locator("#slider-max_pixels input[type=range]")
        box = track.bounding_box()
        try:
            page.mouse.click(box["x"] + box["width"] * 0.05, box["y"] + box["height"] / 2)
            page.wait_for_function(
                "b => document.querySelector('#budget-text').innerText !== b", arg=before, timeout=60_000)
            assert page.locator("#budget-text").inner_text() != before
        finally:
            page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
            browser.close()


def test_switch_waits_for_other_users_then_refuses(app, picture):
    url, engines, registry = app
    # Random weights end answers early, so "another user" is a long request (ignore_eos) started on
    # the app's own engine, in the app's event loop.
    Client(url, verbose=False).predict(*chat_args(registry, picture, max_tokens=1), api_name="/chat")
    engine = engines.engine(MODEL)
    loop = engine._llm.output_handler.get_loop()
    messages = [{"role": "user", "content": [{"type": "text", "text": "Tell a long story."}]}]

    async def other_user():
        rendered = await engine.render(messages, {})
        async for _ in engine.stream(rendered, Sampling(max_tokens=3000, ignore_eos=True)):
            pass

    future = asyncio.run_coroutine_threadsafe(other_user(), loop)
    deadline = time.monotonic() + 30
    while engines.running_requests() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with pytest.raises(AppError, match="cannot switch to tiny-llava-1.5 now"):
            Client(url, verbose=False).predict(OTHER, api_name="/load_model")
        assert engines.loaded() == [MODEL]
    finally:
        future.cancel()


def test_switching_models(app, picture):
    url, engines, registry = app
    deadline = time.monotonic() + 15
    while engines.running_requests() and time.monotonic() < deadline:
        time.sleep(0.1)
    client = Client(url, verbose=False)
    state = client.predict(OTHER, api_name="/load_model")
    assert "Tiny LLaVA-1.5" in state and "ready" in state and "random weights" in state
    assert engines.loaded() == [OTHER]
    job = client.submit(*chat_args(registry, picture, model=OTHER), api_name="/chat")
    out = named(*list(job), job.result())
    assert out["table"]["data"][0][3] == 576
