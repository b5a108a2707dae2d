"""The real Gradio app with a tiny model, driven through its HTTP API with gradio_client."""

from __future__ import annotations

import socket

import pytest
from gradio_client import Client, handle_file

from vlm_demo.engine import EngineManager
from vlm_demo.service import ChatService
from vlm_demo.ui import build_app

from .conftest import ARTIFACTS, make_image

MODEL = "tiny-llava-1.5"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app(registry, settings, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
    engines = EngineManager(settings)
    demo = build_app(ChatService(registry, engines, settings), default_model=MODEL)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", engines
    demo.close()
    engines.shutdown_all()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def picture():
    path = ARTIFACTS / "app-test.png"
    make_image(640, 480).save(path)
    return path


def test_answers_a_question_about_an_uploaded_image(app, picture):
    url, engines = app
    client = Client(url, verbose=False)
    job = client.submit({"text": "What is in this picture?", "files": [handle_file(str(picture))]}, [],
                        MODEL, "", api_name="/chat")
    outputs = list(job)
    history, prompt, expansion, stats, *_ = job.result()
    assert len(outputs) >= 3, "the answer should stream in several updates"
    assert prompt.startswith("USER: <image>\nWhat is in this picture?")
    assert "576 tokens" in expansion
    assert history[-1]["role"] == "assistant" and history[-1]["content"]
    assert "tokens/s" in stats
    assert engines.loaded() == [MODEL]
    assert engines.running_requests() == 0
