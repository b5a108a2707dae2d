"""Gradio's server as the page runs it (``ui/server.py``): the idle queue does not look for events over and over, an
event pushed to it starts at once, and an event does no work the page does not use."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import json
import time

import gradio as gr
import httpx
import pytest

from vlm_demo.ui.server import IDLE_CHECK_S, WakingQueue, tuned, without_matplotlib_lookups

from .conftest import free_port

pytestmark = [pytest.mark.server]


def test_the_idle_queue_sleeps_and_a_pushed_event_starts_at_once(monkeypatch):
    looks, lookups = [], []
    real_len = WakingQueue.__len__
    monkeypatch.setattr(WakingQueue, "__len__", lambda self: looks.append(1) or real_len(self))
    real_find = importlib.machinery.PathFinder.find_spec
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", classmethod(
        lambda cls, name, *args: lookups.append(name) or real_find(name, *args)))
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda text: text.upper(), box, box, api_name="upper")
    demo.queue()
    tuned(demo._queue, 0.005)
    without_matplotlib_lookups()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        time.sleep(0.5)
        looks.clear()
        lookups.clear()
        time.sleep(2.0)
        assert len(looks) <= 2 * (2.0 / IDLE_CHECK_S + 1), len(looks)  # Gradio's loop: ~400 (every 5 ms)
        waits = [asyncio.run(_started_after(f"http://127.0.0.1:{port}", f"q{i}")) for i in range(5)]
        # (a push that did not wake the loop would wait for its next look: up to IDLE_CHECK_S, 0.5 s on average)
        assert max(waits) < 0.1, waits
        # no work the page does not use: Gradio's monitoring summary (a pandas group-by over every event kept, after
        # each event) and, where it is not installed, looking for matplotlib along sys.path twice an event
        assert demo._queue.event_count_at_last_cache == 0 and demo._queue.events_recorded == 5
        looked = "matplotlib" in lookups
        assert importlib.util.find_spec("matplotlib") is not None or not looked
    finally:
        demo.close()


async def _started_after(url: str, text: str) -> float:
    """Seconds from joining the queue with ``text`` until the event's start message (``process_starts``)."""
    session = f"s-{text}"
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
        t0 = time.perf_counter()
        joined = await client.post("/gradio_api/queue/join", json={"data": [text], "fn_index": 0,
                                                                  "session_hash": session, "event_data": None})
        assert joined.status_code == 200, joined.text
        async with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_starts":
                    return time.perf_counter() - t0
    raise AssertionError("no process_starts message")


async def test_an_updates_files_are_moved_once(tmp_path):
    """``files_moved_once``: an output's files are moved into their component's cache once, not at every streamed
    update (Gradio 6.31 checked and copied each file of the chat twice an update: ``bench/update_cost.py``, at the
    fifth question 4.6 ms an update against 2.0 at the first); what is sent is what Gradio's own move gives, inputs go
    as Gradio has them, and a file gone from the cache is moved again."""
    import os

    from gradio import processing_utils
    from PIL import Image

    from vlm_demo.ui.server import FilesMovedOnce, files_moved_once

    installed = processing_utils.async_move_files_to_cache  # (an app built in this process installed the memo)
    gradios = installed.move if isinstance(installed, FilesMovedOnce) else installed
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"picture-{i}.png"))
        Image.new("RGB", (32, 24), (40 * i, 90, 200)).save(paths[-1])
    with gr.Blocks():
        chat = gr.Chatbot()
    value = chat.postprocess([{"role": "user", "content": [{"path": p} for p in paths]},
                              {"role": "assistant", "content": "three pictures"}])
    moves = []

    async def counted(*args, **kwargs):
        moves.append(args[0])
        return await gradios(*args, **kwargs)
    once = FilesMovedOnce(counted)
    expected = await gradios(value, chat, postprocess=True)
    first, second = [await once(value, chat, postprocess=True) for _ in range(2)]
    assert first == second == expected and len(moves) == 3  # each file once, the update as Gradio makes it
    moved = _file_paths(expected)[0]
    assert len(_file_paths(expected)) == 3 and os.path.exists(moved) and moved not in paths  # (in the cache)
    os.remove(moved)
    again = await once(value, chat, postprocess=True)
    assert again == expected and len(moves) == 4 and os.path.exists(moved)  # gone from the cache: moved again
    await once(value, chat)  # an input: as Gradio has it
    assert len(moves) == 5
    processing_utils.async_move_files_to_cache = gradios
    try:
        files_moved_once()
        files_moved_once()  # (idempotent: one wrapper)
        assert isinstance(processing_utils.async_move_files_to_cache, FilesMovedOnce)
        assert processing_utils.async_move_files_to_cache.move is gradios
    finally:
        processing_utils.async_move_files_to_cache = installed


def _file_paths(data) -> list[str]:
    """The paths of the files (Gradio's file data) in ``data``, in order."""
    if isinstance(data, dict):
        if (data.get("meta") or {}).get("_type") == "gradio.FileData":
            return [data["path"]]
        return [p for value in data.values() for p in _file_paths(value)]
    return [p for value in data for p in _file_paths(value)] if isinstance(data, list) else []
