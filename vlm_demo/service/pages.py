"""A document read page by page: one request per page of the question's documents (each with the question and the
message's other attachments), sent together so the engine batches them, their answers merged into one stream of
events whose answer holds each page's part in page order. Closing the stream closes every page's request."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..intake import Page
from .requests import (ChatRequest, Delta, Done, Event, Failed, Figures, PageAnswer, Prefilling, Rendered, Turn,
                       Waiting)


def page_requests(request: ChatRequest) -> list[tuple[Page, ChatRequest]]:
    """The request split by its question's document pages: per page, the same request whose question holds that
    page alone (its other pictures and videos kept). ``InputError`` when the question holds no page."""
    question = request.turns[-1]
    images = question.media.get("image", ())
    pages = [item for item in images if isinstance(item, Page)]
    if not pages:
        raise InputError("each page on its own: the message holds no document (attach a PDF)")
    others = tuple(item for item in images if not isinstance(item, Page))
    split = []
    for page in pages:
        media = {**question.media, "image": (*others, page)}
        split.append((page, replace(request, turns=(*request.turns[:-1], Turn("user", question.text, media)),
                                    each_page=False)))
    return split


@dataclass
class _Part:
    """One page's answer as it streams."""

    page: Page
    answer: str = ""
    figures: Figures = Figures()
    """Its figures so far (its stream's own)."""
    done_s: float | None = None
    """Seconds from the document's send to this page's last token, once done."""
    failed: str = ""
    done: Done | None = None
    vision: Any = None
    """The page's picture's expansion as its request rendered it."""

    def shown(self) -> PageAnswer:
        return PageAnswer(self.page.label, self.figures, self.done_s, self.failed, self.vision, self.answer)


def _all_rendered(renders: dict[int, Rendered | None]) -> Rendered:
    """Every page's render in one event: the first rendered page's, with each page's inspection in page order."""
    first = next(r for _, r in sorted(renders.items()) if r is not None)
    return dataclasses.replace(first, pages=tuple(
        r.inspection if r is not None else None for _, r in sorted(renders.items())))


def composed(pages: Sequence[PageAnswer], body: Callable[[str], str] | None = None) -> str:
    """The document's answer as the chat shows it: each page's heading (its figures once done) and its answer, in
    page order; ``body``: how an answer shows (a reader's as the document it describes), else as it is."""
    def text(p: PageAnswer) -> str:
        figures = (f" · {p.figures.tokens} tokens, {p.figures.tokens_per_s:.0f} tokens/s, done at {p.done_s:.1f} s"
                   if p.done_s is not None and not p.failed else "")
        shown = f"*[failed: {p.failed}]*" if p.failed else (body(p.answer) if body and p.answer else p.answer) or "…"
        return f"**{p.label}**{figures}\n\n{shown}"
    return "\n\n".join(text(p) for p in pages)


async def each_page(request: ChatRequest, ask: Callable[[ChatRequest], AsyncIterator[Event]]) -> AsyncIterator[Event]:
    """The answers to ``request``'s pages, each asked on its own with ``ask`` (the service's one-request stream) and
    all at once: one ``Rendered`` once every page's request has rendered (or was refused), with every page's
    inspection (``Rendered.pages``; each page's render is vLLM's, as its own request gets it), the first page's
    ``Waiting`` and ``Prefilling`` events after it, then ``Delta`` events whose ``answer`` is the document's so far
    (``composed``), then ``Done`` with the totals: tokens of all pages, tokens/s over the whole read, time to first token of the first page to
    start, and per page its figures (``Done.pages``: each a ``PageAnswer``). A page that fails is said in its part; all failing is
    ``Failed``."""
    split = page_requests(request)
    parts = [_Part(page) for page, _ in split]
    queue: asyncio.Queue[tuple[int, Event | Exception | None]] = asyncio.Queue()
    t0 = time.perf_counter()

    async def pump(i: int, one: ChatRequest) -> None:
        try:
            async with contextlib.aclosing(ask(one)) as events:
                async for event in events:
                    await queue.put((i, event))
        except Exception as exc:  # (a bug, not a page's ``Failed``): raised by the document's stream, not a hang
            await queue.put((i, exc))
            return
        await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, one)) for i, (_, one) in enumerate(split)]
    first_token, waited, open_streams = 0.0, 0.0, len(tasks)
    renders: dict[int, Rendered | None] = {}
    """Each page's render (None: refused before it), until all are there and said in one ``Rendered``."""
    try:
        while open_streams:
            i, event = await queue.get()
            if isinstance(event, Exception):
                raise event
            part = parts[i]
            if event is None:
                open_streams -= 1
                continue
            if isinstance(event, Rendered):
                part.vision = event.inspection.items["image"][-1]
                renders[i] = event
                if len(renders) == len(parts):
                    yield _all_rendered(renders)
                continue
            if isinstance(event, Waiting | Prefilling):
                if i == 0 and len(renders) == len(parts):
                    waited = event.waited_s
                    yield event
                continue
            if isinstance(event, Failed):
                part.failed, part.done_s = event.message, time.perf_counter() - t0
                if i not in renders:  # refused before its render
                    renders[i] = None
                    if len(renders) == len(parts) and any(renders.values()):
                        yield _all_rendered(renders)
            elif isinstance(event, Delta | Done):
                if isinstance(event, Delta) and event.figures.tokens and not first_token:
                    first_token = time.perf_counter()
                part.answer, part.figures = event.answer, event.figures
                if isinstance(event, Done):
                    part.done, part.done_s = event, time.perf_counter() - t0
                waited = max(waited, event.figures.wait_s)
            if len(renders) < len(parts):  # (the answer follows the one ``Rendered``)
                continue
            tokens = sum(p.figures.tokens for p in parts)
            now = time.perf_counter()
            rate = (tokens - 1) / (now - first_token) if first_token and tokens > 1 and now > first_token else 0.0
            shown = tuple(p.shown() for p in parts)
            yield Delta("", composed(shown), figures=Figures(
                tokens, min((p.figures.ttft_s for p in parts if p.figures.tokens), default=0.0), rate, wait_s=waited),
                pages=shown)
    finally:  # ended, or closed early (Stop): every page's request is closed, which aborts it in the engine
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if all(p.failed for p in parts):
        yield Failed(f"every page failed; {parts[0].page.label}: {parts[0].failed}")
        return
    answered = [p.done.figures for p in parts if p.done is not None]
    end = time.perf_counter()
    tokens = sum(p.figures.tokens for p in parts)
    shown = tuple(p.shown() for p in parts)
    finish = ("stop" if all(f.finish_reason == "stop" for f in answered) else
              next((f.finish_reason for f in answered if f.finish_reason != "stop"), None))
    yield Done(composed(shown), Figures(
        tokens, min((f.ttft_s for f in answered), default=0.0),
        (tokens - 1) / (end - first_token) if first_token and tokens > 1 and end > first_token else 0.0, finish,
        sum(f.prompt_tokens for f in answered), sum(f.cached_tokens for f in answered),
        sum(f.reasoning_tokens for f in answered), waited, len(parts), end - t0), pages=shown)
