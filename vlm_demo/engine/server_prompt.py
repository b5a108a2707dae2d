"""A server's side of an audit: what an OpenAI-compatible server made of one request, from the best it offers.

1. vLLM's render endpoint (``/v1/chat/completions/render``, a server started with ``--enable-scale-out``): the
   expanded token ids and each picture's range;
2. else the ids a vLLM server returns with a chat completion (``return_token_ids``; one token generated);
3. else the usage counts (``prompt_tokens``) any OpenAI-compatible server gives.

A refusal (a template without a placeholder: vLLM's 500 "Failed to apply prompt replacement") is part of the
answer, not an exception: the audit explains it. The reference side is vLLM's renderer of the checkpoint's own
files (``EngineManager.reference_renderer``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RemoteError
from ..registry import Sampling
from .openai_request import prompt_body, request_body
from .remote import RemoteEngine
from .remote_errors import NOT_OFFERED
from .remote_prompt import content_format, rendered_ids, served_chat_template
from .types import ItemRange

RENDER, RETURNED_IDS, USAGE_COUNTS = "render endpoint", "returned ids", "usage counts"
"""How the server's side was read, best first."""
ONE_TOKEN = Sampling(temperature=0.0, top_p=1.0, max_tokens=1)
"""The chat completion that reads a server's prompt: one token, greedy."""


@dataclass(frozen=True)
class ServerPrompt:
    """What the server made of the request."""

    how: str
    """``RENDER``, ``RETURNED_IDS`` or ``USAGE_COUNTS`` (what the server offered)."""
    ids: tuple[int, ...] | None = None
    """The expanded prompt's ids (render endpoint, returned ids)."""
    ranges: Mapping[str, tuple[ItemRange, ...]] | None = None
    """Each picture's or clip's range by modality (render endpoint only)."""
    prompt_tokens: int | None = None
    """The prompt's length as the server counts it."""
    error: str | None = None
    """The server's refusal of the request, in its own words."""
    content_format: str | None = None
    """The content format of the server's chat template (``/tokenizer_info``), where it says."""
    root: str | None = None
    """The checkpoint the server serves (``/v1/models`` root), where it says."""
    max_model_len: int | None = None
    """The server's context window, where it says."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """The usage's ``prompt_tokens_details`` (a count-only audit shows them)."""


async def server_prompt(remote: RemoteEngine, messages: Sequence[Mapping[str, Any]], mm_kwargs: Mapping[str, Any],
                        media_io: Mapping[str, Mapping[str, Any]] | None = None,
                        prefer_render: bool = True) -> ServerPrompt:
    """The server's prompt for ``messages`` with ``mm_kwargs``: by its render endpoint, else returned ids, else
    usage counts. ``RemoteError`` only when the server cannot be reached or is not an OpenAI server."""
    entry = await remote.model_entry()
    facts: dict[str, Any] = {
        "root": entry.get("root") if isinstance(entry.get("root"), str) else None,
        "max_model_len": int(entry["max_model_len"]) if entry.get("max_model_len") else None}
    try:
        info = await remote.call("GET", "/tokenizer_info", not_offered=NOT_OFFERED | {404})
    except RemoteError:
        info = None
    template = served_chat_template(info, facts["root"]) if isinstance(info, dict) else None
    if template:
        facts["content_format"] = await asyncio.to_thread(content_format, template)  # (imports vLLM)
    body = prompt_body(remote.served_model_name, messages, mm_kwargs, media_io)
    if prefer_render:
        try:
            out = await remote.media_call("/v1/chat/completions/render", body, not_offered=NOT_OFFERED)
        except RemoteError as exc:
            return ServerPrompt(RENDER, error=_refusal(exc), **facts)
        if out is not None:
            ids, ranges = rendered_ids(out)
            return ServerPrompt(RENDER, ids=ids, prompt_tokens=len(ids), ranges=ranges, **facts)
    try:
        out = await remote.media_call("/v1/chat/completions",
                                      request_body(body, ONE_TOKEN, stream=False) | {"return_token_ids": True})
    except RemoteError as exc:
        return ServerPrompt(RETURNED_IDS, error=_refusal(exc), **facts)
    usage = out.get("usage") or {}
    ids = out.get("prompt_token_ids")
    if isinstance(ids, list) and ids:
        return ServerPrompt(RETURNED_IDS, ids=tuple(int(i) for i in ids), prompt_tokens=len(ids), **facts)
    count = usage.get("prompt_tokens")
    return ServerPrompt(USAGE_COUNTS, prompt_tokens=int(count) if count is not None else None,
                        details=usage.get("prompt_tokens_details") or {}, **facts)


def _refusal(exc: RemoteError) -> str:
    """The server's own words of a refusal (after the URL and status the app's message puts first)."""
    text = str(exc)
    return text.split(": the server answered ", 1)[-1]
