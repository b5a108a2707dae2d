"""Users of the running app that talk to it as the page does in a browser, in their own process: each question's
picture uploaded when it is attached (before Enter), then the question a join of Gradio's queue and its
server-sent events read as they arrive (httpx, asyncio), where ``gradio_client`` (``bench.gradio_load``) uploads
inside ``submit`` and looks for new messages in three polling loops per user (every 1-2 ms there). Each of ``--users``
is one browser tab (one session) that asks ``--per-user`` questions back to back, each in a new conversation (Clear
before it, as a person starts one), and runs what the page runs when an answer's render comes: its panels' event
(queued) and the message box's (not queued). Prints one JSON object.

    python -m bench.browser_load --url URL --model NAME --users 8 --per-user 4 --max-tokens 128 --picture FILE
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import httpx
from gradio_client import Client
from gradio_client.utils import apply_diff

from vlm_demo.ui.contract import CHAT_OUTPUTS, named_outputs

from .common import QUESTION, run_users, shows_answer, users_parser
from .gradio_load import chat_args


class Page:
    """The app's ``/chat`` endpoint as the page calls it: its index in Gradio's queue, and the data of one
    question (``gradio_client`` resolves the endpoint and its inputs, state included, once); Clear's index, and the
    events the page runs on an answer's render (from the page's configuration)."""

    def __init__(self, url: str, model: str, picture: str, max_tokens: int, api_name: str = "chat",
                 question: str = QUESTION, controls: dict[str, Any] | None = None):
        client = Client(url, verbose=False, download_files=False)
        try:
            endpoint = client.endpoints[client._infer_fn_index(f"/{api_name}", None)]
            self.fn_index = endpoint.fn_index
            args = chat_args(model, picture, max_tokens, api_name, question, controls)
            self.data = list(endpoint.process_input_files(*endpoint.insert_empty_state(*args)))
            config = client.config
        finally:
            client.close()
        dependencies = {d["id"]: d for d in config["dependencies"]}
        self.clear_index = next(i for i, d in dependencies.items() if d.get("api_name") == "clear")
        panels = next(d for d in dependencies.values() if d.get("api_name") == "panels")
        self.rendered_id = panels["inputs"][0]
        self.on_render = [(i, d.get("queue") is not False, [None] * len(d["inputs"])) for i, d in dependencies.items()
                          if [self.rendered_id, "change"] in [list(t) for t in d["targets"]]]
        """What the page runs when the answer's render state changes: (fn_index, queued, data)."""
        self.picture = picture
        self.predict_url = url.rstrip("/") + "/gradio_api/run/predict"
        self.join_url = url.rstrip("/") + "/gradio_api/queue/join"
        self.data_url = url.rstrip("/") + "/gradio_api/queue/data"
        self.upload_url = url.rstrip("/") + "/gradio_api/upload"

    async def question(self, client: httpx.AsyncClient) -> list[Any]:
        """The data of one question, its picture uploaded now (the page uploads a file when it is attached)."""
        with open(self.picture, "rb") as f:
            uploaded = await client.post(self.upload_url, files={"files": (os.path.basename(self.picture), f)})
        uploaded.raise_for_status()
        path = uploaded.json()[0]

        def swap(value: Any) -> Any:
            if isinstance(value, dict) and (value.get("meta") or {}).get("_type") == "gradio.FileData":
                return {**value, "path": path}
            if isinstance(value, dict):
                return {k: swap(v) for k, v in value.items()}
            return [swap(v) for v in value] if isinstance(value, list) else value

        return swap(self.data)


def first_text(outputs: list[Any]) -> bool:
    """Whether the chat output shows answer text yet."""
    return shows_answer(named_outputs("chat", outputs[:len(CHAT_OUTPUTS)])["chat"])


_sessions: dict[asyncio.Task, str] = {}
"""Each user's session (its browser tab), by the user's task."""


async def join(client: httpx.AsyncClient, page: Page, session: str, fn_index: int, data: list[Any]) -> str:
    """Join Gradio's queue with an event of the page; its event id."""
    joined = await client.post(page.join_url, json={"data": data, "fn_index": fn_index, "session_hash": session,
                                                    "event_data": None, "trigger_id": None})
    joined.raise_for_status()
    return joined.json()["event_id"]


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


async def ask(client: httpx.AsyncClient, page: Page) -> tuple[float, int]:
    """One question in the user's tab, in a new conversation: time from the join (Enter) to the first answer text,
    tokens generated. When the render comes, the page's own events on it run beside the answer."""
    user = asyncio.current_task()
    session = _sessions.get(user)
    if session is None:
        session = _sessions[user] = uuid.uuid4().hex[:11]
    else:
        await clear(client, page, session)
    data = await page.question(client)
    t0 = time.perf_counter()
    ttft, outputs = await answer(client, page, session, data)
    stats = named_outputs("chat", (outputs or [None] * len(CHAT_OUTPUTS))[:len(CHAT_OUTPUTS)])["stats_data"]
    if not isinstance(stats, dict) or stats.get("status") != "done":
        raise RuntimeError(f"the answer did not finish: {stats!r}")
    return ttft or time.perf_counter() - t0, stats["tokens"]


async def answer(client: httpx.AsyncClient, page: Page, session: str, data: list[Any]) -> tuple[float, list[Any]]:
    """The page's event (``page.fn_index``) with ``data`` in the tab ``session``, its server-sent messages read as
    they arrive: the time from the join to the first answer text (0 when none came), and its last outputs. When the
    render comes, the page's own events on it run beside the answer, and are waited for."""
    t0 = time.perf_counter()
    chat = await join(client, page, session, page.fn_index, data)
    pending, ttft, outputs = {chat}, 0.0, None
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
                    else:
                        body = {"data": args, "fn_index": fn_index, "session_hash": session, "event_data": None}
                        (await client.post(page.predict_url, json=body)).raise_for_status()
        elif msg.get("msg") == "process_completed" and event in pending:
            if not msg.get("success", True):
                raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
            if event == chat:
                outputs = msg["output"]["data"]
            pending.discard(event)
            if not pending:
                break
    return ttft, outputs or []


async def load(page: Page, users: int, per_user: int) -> dict:
    limits = httpx.Limits(max_connections=2 * users, max_keepalive_connections=2 * users)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        return await run_users(lambda: ask(client, page), users, per_user, (httpx.HTTPError, ValueError, RuntimeError))


def main(argv: list[str] | None = None) -> int:
    args = users_parser(__doc__).parse_args(argv)
    page = Page(args.url, args.model, args.picture, args.max_tokens)
    json.dump(asyncio.run(load(page, args.users, args.per_user)), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
