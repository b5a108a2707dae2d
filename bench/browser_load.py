"""Users of the running app that talk to it as the page does in a browser, in their own process: each question's
picture uploaded when it is attached (before Enter), then the question a join of Gradio's queue and its
server-sent events read as they arrive (httpx, asyncio), where ``gradio_client`` (``bench.gradio_load``) uploads
inside ``submit`` and looks for new messages in three polling loops per user (every 1-2 ms there). Each of ``--users`` asks ``--per-user``
questions back to back, each in a new conversation (a new session). Prints one JSON object.

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

from .common import run_users, users_parser
from .gradio_load import chat_args


class Page:
    """The app's ``/chat`` endpoint as the page calls it: its index in Gradio's queue, and the data of one
    question (``gradio_client`` resolves the endpoint and its inputs, state included, once)."""

    def __init__(self, url: str, model: str, picture: str, max_tokens: int):
        client = Client(url, verbose=False, download_files=False)
        try:
            endpoint = client.endpoints[client._infer_fn_index("/chat", None)]
            self.fn_index = endpoint.fn_index
            args = chat_args(model, picture, max_tokens)
            self.data = list(endpoint.process_input_files(*endpoint.insert_empty_state(*args)))
        finally:
            client.close()
        self.picture = picture
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
    chat = named_outputs("chat", outputs[:len(CHAT_OUTPUTS)])["chat"]
    return isinstance(chat, list) and bool(chat) and chat[-1]["role"] == "assistant" and bool(chat[-1]["content"])


async def ask(client: httpx.AsyncClient, page: Page) -> tuple[float, int]:
    """One question in a new session: time from the join (Enter) to the first answer text, tokens generated."""
    session = uuid.uuid4().hex[:11]
    data = await page.question(client)
    t0 = time.perf_counter()
    joined = await client.post(page.join_url, json={"data": data, "fn_index": page.fn_index,
                                                   "session_hash": session, "event_data": None, "trigger_id": None})
    joined.raise_for_status()
    ttft, outputs = 0.0, None
    async with client.stream("GET", page.data_url, params={"session_hash": session}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("msg") == "process_generating":
                data = msg["output"]["data"]
                outputs = list(data) if outputs is None else [apply_diff(o, d) for o, d in zip(outputs, data, strict=True)]
                if not ttft and first_text(outputs):
                    ttft = time.perf_counter() - t0
            elif msg.get("msg") == "process_completed":
                if not msg.get("success", True):
                    raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
                outputs = msg["output"]["data"]
                break
    stats = named_outputs("chat", (outputs or [None] * len(CHAT_OUTPUTS))[:len(CHAT_OUTPUTS)])["stats_data"]
    if not isinstance(stats, dict) or stats.get("status") != "done":
        raise RuntimeError(f"the answer did not finish: {stats!r}")
    return ttft or time.perf_counter() - t0, stats["tokens"]


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
