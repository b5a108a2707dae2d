"""Users of the running app that talk to it as the page does in a browser, in their own process: every event
Chromium sends for a question, in its order (held by ``tests/test_app.py::test_the_benchmarks_page_users_send_what_chromium_sends``),
with the page's own protocol: queued events a join of Gradio's queue and their server-sent events read as they arrive
(httpx, asyncio), the others a POST each, where ``gradio_client`` (``bench.gradio_load``) uploads inside ``submit``
and looks for new messages in three polling loops per user (every 1-2 ms there). Each of ``--users`` is one browser
tab (one session) that asks ``--per-user`` questions back to back, each in a new conversation (Clear before it, as a
person starts one); its status timer ticks meanwhile. Prints one JSON object.

A question, as Chromium sends it (a picture attached, the question typed at once, Enter):

1. the picture uploaded; the message box's change twice (the box checks the file and keeps it); the change of
   the files kept (``Page.attached``): the panels rendered for the attachment (queued);
2. the box's change as the text is typed (one: the text pasted; a person typing sends one per keystroke);
3. the chat (queued, streamed); on its render the page's events on the render state (the panels, queued; the box
   emptied, not queued), the box's change as it empties (and the files' change where that changes them);
4. after the answer, the status line (the chat's ``.then``).

    python -m bench.browser_load --url URL --model NAME --users 8 --per-user 4 --max-tokens 128 --picture FILE
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from gradio_client import Client
from gradio_client.utils import apply_diff

from vlm_demo.settings import STATUS_EVERY_S
from vlm_demo.ui.contract import CHAT_OUTPUTS, named_outputs

from .common import QUESTION, run_users, shows_answer, users_parser
from .gradio_load import chat_args


def _data(client: Client, api_name: str, args: list[Any]) -> list[Any]:
    """An endpoint's data as the page sends it (state inputs empty, files as file data)."""
    endpoint = client.endpoints[client._infer_fn_index(f"/{api_name}", None)]
    return list(endpoint.process_input_files(*endpoint.insert_empty_state(*args)))


class Page:
    """The page's events for a question, from its configuration: ``/chat``'s index in Gradio's queue and the data of
    one question (``gradio_client`` resolves the endpoint and its inputs, state included, once); Clear's; the message
    box's change and the change of the files it keeps, with their data; the events on an answer's render state and
    after the answer; the status timer's tick."""

    def __init__(self, url: str, model: str, picture: str, max_tokens: int, api_name: str = "chat",
                 question: str = QUESTION, controls: dict[str, Any] | None = None):
        client = Client(url, verbose=False, download_files=False)
        try:
            self.fn_index = client.endpoints[client._infer_fn_index(f"/{api_name}", None)].fn_index
            self.data = _data(client, api_name, chat_args(model, picture, max_tokens, api_name, question, controls))
            self.inspect_data = _data(client, "inspect", chat_args(model, picture, 0, "inspect", question, controls))
            config = client.config
        finally:
            client.close()
        dependencies = {d["id"]: d for d in config["dependencies"]}

        def on(component: int, event: str) -> list[tuple[int, dict]]:
            return [(i, d) for i, d in dependencies.items() if [component, event] in [list(t) for t in d["targets"]]]
        chat = dependencies[self.fn_index]
        self.message_id = chat["inputs"][0]  # (the question's box: the chat's first input)
        self.clear_index = next(i for i, d in dependencies.items() if d.get("api_name") == "clear")
        panels = next(d for d in dependencies.values() if d.get("api_name") == "panels")
        self.rendered_id = panels["inputs"][0]
        self.on_render = sorted(((i, d.get("queue") is not False, [None] * len(d["inputs"]))
                                 for i, d in on(self.rendered_id, "change")), key=lambda e: e[1])
        """What the page runs when the answer's render state changes: (fn_index, queued, data), those not queued
        first (as Chromium sends them)."""
        ((self.box_index, box),) = on(self.message_id, "change")
        self.attached_id = box["inputs"][1]  # (the files the box keeps: its change renders them)
        self.box_outputs = box["outputs"]
        ((self.attached_index, _),) = on(self.attached_id, "change")
        model_id = chat["inputs"][2]
        self.after_chat = [(i, d.get("queue") is not False, [model if c == model_id else None for c in d["inputs"]])
                           for i, d in dependencies.items() if d.get("trigger_after") == self.fn_index]
        """What the page runs once the answer has ended (the status line): (fn_index, queued, data)."""
        (timer,) = [c for c in config["components"] if c.get("type") == "timer"]
        ((self.tick_index, tick),) = on(timer["id"], "tick")
        self.tick_data = [model if c == model_id else None for c in tick["inputs"]]
        self.picture = picture
        base = url.rstrip("/") + "/gradio_api/"
        self.predict_url, self.join_url, self.data_url, self.upload_url = (
            base + "run/predict", base + "queue/join", base + "queue/data", base + "upload")
        self.sent: list[tuple[str, int | None]] | None = None
        """Where set (a list): each request sent, as (``upload``, None), (``predict``, fn_index) or (``join``,
        fn_index), in order (the test holds it to what Chromium sends)."""

    def note(self, kind: str, fn_index: int | None = None) -> None:
        if self.sent is not None:
            self.sent.append((kind, fn_index))

    async def question(self, client: httpx.AsyncClient) -> list[Any]:
        """The data of one question, its picture uploaded now (the page uploads a file when it is attached)."""
        path = await self.upload(client)
        return _swap(self.data, path)

    async def upload(self, client: httpx.AsyncClient) -> str:
        """The picture uploaded: its path on the server."""
        self.note("upload")
        with open(self.picture, "rb") as f:
            uploaded = await client.post(self.upload_url, files={"files": (os.path.basename(self.picture), f)})
        uploaded.raise_for_status()
        return uploaded.json()[0]


def _swap(data: Any, path: str) -> Any:
    """``data`` with each file's path ``path`` (the file as uploaded)."""
    if isinstance(data, dict) and (data.get("meta") or {}).get("_type") == "gradio.FileData":
        return {**data, "path": path}
    if isinstance(data, dict):
        return {k: _swap(v, path) for k, v in data.items()}
    return [_swap(v, path) for v in data] if isinstance(data, list) else data


def first_text(outputs: list[Any]) -> bool:
    """Whether the chat output shows answer text yet."""
    return shows_answer(named_outputs("chat", outputs[:len(CHAT_OUTPUTS)])["chat"])


@dataclass
class Tab:
    """One browser tab: its session, and the values the page holds that its events send."""
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:11])
    attached: str = ""
    """The files the message box keeps (``Page.attached``), as the server last set them."""
    pending: set[str] = field(default_factory=set)
    """The tab's queued events not completed yet."""


_tabs: dict[asyncio.Task, Tab] = {}
"""Each user's tab, by the user's task."""
_tickers: list[asyncio.Task] = []
"""Each tab's status timer (cancelled as the load ends)."""


async def join(client: httpx.AsyncClient, page: Page, session: str, fn_index: int, data: list[Any]) -> str:
    """Join Gradio's queue with an event of the page; its event id."""
    page.note("join", fn_index)
    joined = await client.post(page.join_url, json={"data": data, "fn_index": fn_index, "session_hash": session,
                                                    "event_data": None, "trigger_id": None})
    joined.raise_for_status()
    return joined.json()["event_id"]


async def predict(client: httpx.AsyncClient, page: Page, session: str, fn_index: int, data: list[Any]) -> list[Any]:
    """An event of the page that is not queued: its outputs."""
    page.note("predict", fn_index)
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None}
    response = await client.post(page.predict_url, json=body)
    response.raise_for_status()
    return response.json()["data"]


async def box_changed(client: httpx.AsyncClient, page: Page, tab: Tab, message: Any, times: int = 1) -> None:
    """The message box's change (``message`` its value; ``times`` such events sent together, as Chromium sends two
    as a file is attached), and the change of the files it keeps where the box's event changed them (queued: the
    panels render them)."""
    changes = [predict(client, page, tab.session, page.box_index, [message, tab.attached]) for _ in range(times)]
    values = [o[page.box_outputs.index(page.attached_id)] for o in await asyncio.gather(*changes)]
    attached = next((v for v in reversed(values) if isinstance(v, str)), None)  # (the page applies each in turn)
    if attached is not None and attached != tab.attached:
        tab.attached = attached
        data = [message if i == 0 else v for i, v in enumerate(page.inspect_data)]
        tab.pending.add(await join(client, page, tab.session, page.attached_index, data))


async def messages(client: httpx.AsyncClient, page: Page, session: str):
    """The session's server-sent messages as they arrive."""
    async with client.stream("GET", page.data_url, params={"session_hash": session}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                yield json.loads(line[5:])


async def clear(client: httpx.AsyncClient, page: Page, session: str) -> None:
    """Clear the tab's conversation, as the page's Clear does, and wait for it."""
    event = await join(client, page, session, page.clear_index, [])
    async for msg in messages(client, page, session):
        if msg.get("event_id") == event and msg.get("msg") == "process_completed":
            return


async def ticking(client: httpx.AsyncClient, page: Page, tab: Tab) -> None:
    """The tab's status timer (``STATUS_EVERY_S``: the engine is running) until cancelled."""
    while True:
        await asyncio.sleep(STATUS_EVERY_S[1])
        await predict(client, page, tab.session, page.tick_index, page.tick_data)


async def ask(client: httpx.AsyncClient, page: Page) -> tuple[float, int]:
    """One question in the user's tab, in a new conversation, with every event Chromium sends for it: the time from
    the chat's join (Enter) to the first answer text, and the tokens generated."""
    user = asyncio.current_task()
    tab = _tabs.get(user)
    if tab is None:
        tab = _tabs[user] = Tab()
        _tickers.append(asyncio.get_running_loop().create_task(ticking(client, page, tab)))
    else:
        await clear(client, page, tab.session)
    data = _swap(page.data, await page.upload(client))
    message = data[0]
    await box_changed(client, page, tab, {**message, "text": ""}, times=2)  # attached: the box checks the file...
    await box_changed(client, page, tab, message)  # ...and the question typed
    t0 = time.perf_counter()
    ttft, outputs = await answer(client, page, tab.session, data, tab)
    stats = named_outputs("chat", (outputs or [None] * len(CHAT_OUTPUTS))[:len(CHAT_OUTPUTS)])["stats_data"]
    if not isinstance(stats, dict) or stats.get("status") != "done":
        raise RuntimeError(f"the answer did not finish: {stats!r}")
    return ttft or time.perf_counter() - t0, stats["tokens"]


async def answer(client: httpx.AsyncClient, page: Page, session: str, data: list[Any],
                 tab: Tab | None = None) -> tuple[float, list[Any]]:
    """The page's event (``page.fn_index``) with ``data`` in the tab ``session``, its server-sent messages read as
    they arrive: the time from the join to the first answer text (0 when none came), and its last outputs. When the
    render comes, the page's own events on it run beside the answer (the box emptied, and its change); once the
    answer has ended, those after it; each waited for, with the tab's other queued events."""
    tab = tab or Tab(session)
    t0 = time.perf_counter()
    chat = await join(client, page, session, page.fn_index, data)
    pending, ttft, outputs = tab.pending | {chat}, 0.0, None
    tab.pending = pending
    async for msg in messages(client, page, session):
        event = msg.get("event_id")
        if event == chat and msg.get("msg") == "process_generating":
            data = msg["output"]["data"]
            outputs = list(data) if outputs is None else [apply_diff(o, d) for o, d in zip(outputs, data, strict=True)]
            if not ttft and first_text(outputs):
                ttft = time.perf_counter() - t0
            if page.rendered_id in (msg["output"].get("changed_state_ids") or ()):
                for fn_index, queued, args in page.on_render:
                    if queued:
                        pending.add(await join(client, page, session, fn_index, args))
                        continue
                    box = (await predict(client, page, session, fn_index, args))[0]
                    if not (isinstance(box, dict) and box.get("__type__") == "update"):  # the box emptied: its change
                        await box_changed(client, page, tab, box)
        elif msg.get("msg") == "process_completed" and event in pending:
            if not msg.get("success", True):
                raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
            if event == chat:
                outputs = msg["output"]["data"]
                for fn_index, queued, args in page.after_chat:
                    if queued:
                        pending.add(await join(client, page, session, fn_index, args))
                    else:
                        await predict(client, page, session, fn_index, args)
            pending.discard(event)
            if not pending:
                break
    return ttft, outputs or []


async def load(page: Page, users: int, per_user: int) -> dict:
    limits = httpx.Limits(max_connections=3 * users, max_keepalive_connections=3 * users)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        try:
            return await run_users(lambda: ask(client, page), users, per_user,
                                   (httpx.HTTPError, ValueError, RuntimeError))
        finally:
            for ticker in _tickers:
                ticker.cancel()
            await asyncio.gather(*_tickers, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    args = users_parser(__doc__).parse_args(argv)
    page = Page(args.url, args.model, args.picture, args.max_tokens)
    json.dump(asyncio.run(load(page, args.users, args.per_user)), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
