"""One answer's stream as page updates: the chat service's events for a question become the chat, the stats, the
boxes and Stop's state, grouped by time; each session's answer while it streams (Stop ends it) and its last
render (which the panels' own event draws)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from ..conversation import Conversation, Exchange, chat_messages
from ..inspector import Inspection
from ..service import (ChatRequest, ChatService, Delta, Done, Failed, Figures, PageAnswer, Prefilling, Rendered,
                       Waiting)
from ..settings import PAGE_RENDERS_KEPT
from .answer import document_view, generating_text, reading_text, stats_data, stats_of, stats_text
from .controls import refuse
from .layout import STOP_LABEL, Page
from .overlays import Boxes, PageBoxes
from .status import prefill_text, rendered_text, sent_text, waiting_text

STOP_ON, STOP_OFF = gr.update(interactive=True), gr.update(interactive=False)
"""Stop while an answer runs, and not otherwise."""


def streaming_values(stats: dict[str, Any]) -> dict[str, Any]:
    """The panels' values while an answer streams, by output name (``stats_data``: the answer's figures so far)."""
    return {"stats": "generating…", "stats_data": stats, "boxes": [], "stop_btn": STOP_ON}


def text_update(page: Page, shown: dict[str, Any], conversation: Conversation, stats: Figures) -> dict[Any, Any]:
    """One streamed update of the answer's text: the chat with ``shown``'s values and the stats line counting the
    tokens so far. Stop goes as its value alone (it stays as the answer's first update set it: a property update
    builds a new Button, half of Gradio's work on the update), and the conversation state is left out (setting a
    State rebuilds its configuration; the answer's last update, a Stop's included, sets it as shown)."""
    return page.values(**shown | {"stats": generating_text(stats), "stop_btn": STOP_LABEL},
                       chat=chat_messages(conversation))


async def _with_boxes(boxes: Boxes | PageBoxes | None, conversation: Conversation, shown: dict[str, Any],
                      pages: Sequence[PageAnswer] = ()) -> tuple[Conversation, dict[str, Any]]:
    """The conversation and panel values with the answer's boxes (drawn in a worker thread); ``pages``: a document
    read page by page, its pages' parts."""
    if boxes is None or not conversation.exchanges:
        return conversation, shown
    figures, table = await asyncio.to_thread(boxes.update, conversation.exchanges[-1].answer, pages)
    return conversation.with_last(figures=figures), shown | {"boxes": table}


@dataclasses.dataclass
class Render:
    """A session's render for an answer (the request as the engine got it), and its panels once drawn."""

    request: ChatRequest
    """The request as the engine got it (its sampling as the service sent it)."""
    inspection: Inspection
    """vLLM's render of it, inspected (a document read page by page: its first page's request's)."""
    pages: tuple[Inspection | None, ...] = ()
    """A document read page by page: every page's request's render, in page order (None: refused before it)."""
    view: dict[str, Any] | None = None
    """Its panels by output name (``panels.rendered_view``), once drawn (the ``/panels`` event)."""
    export: dict[str, str] | None = None
    """Its Export by output name (``panels.export_view``), once built (Export opened, or ``/export`` asked)."""


@dataclasses.dataclass
class _Live:
    """A session's answer while it streams: the conversation as last shown, and whether Stop was pressed."""

    conversation: Conversation
    """The conversation as last shown."""
    stopped: bool = False
    """Set by Stop: the stream ends (closing it aborts the engine request) and shows the answer as stopped."""
    stats: Figures = dataclasses.field(default_factory=Figures)
    """The answer's figures so far (what a Stop shows)."""
    tokens_flowing: bool = False
    """Whether answer text has begun to come (then events come often, and each one checks ``stopped``)."""
    wake: asyncio.Future[None] | None = None
    """Done when Stop is pressed: wakes a stream waiting for a slow event (the render, the engine's start)."""

    def shown(self, conversation: Conversation) -> Conversation:
        """Note ``conversation`` as the one being shown; returns it."""
        self.conversation = conversation
        return conversation

    def stop(self) -> None:
        """Stop pressed (from any thread)."""
        self.stopped = True
        wake = self.wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # (its loop closed: nothing waits)
                wake.get_loop().call_soon_threadsafe(lambda: wake.done() or wake.set_result(None))

    async def events(self, events: Any):
        """``events`` until they end or Stop is pressed. Until answer text comes (the render, an engine's start)
        a Stop wakes the wait at once; then each event checks it (they come every few milliseconds), which costs
        no task per token."""
        self.wake = asyncio.get_running_loop().create_future()
        while not self.stopped:
            if self.tokens_flowing:
                event = await anext(events, None)
            else:
                step = asyncio.ensure_future(anext(events, None))
                try:
                    await asyncio.wait({step, self.wake}, return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:  # this answer is cancelled (the app stops): so is its step, before
                    step.cancel()               # the stream is closed (a stream closed while it runs would raise)
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    raise
                if not step.done():  # Stop: the service's stream is cancelled where it waits
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    return
                event = step.result()
            if event is None or self.stopped:
                return
            self.tokens_flowing = self.tokens_flowing or isinstance(event, Delta)
            yield event


class Answers:
    """The page's answers: each session's answer while it streams and its last render, and the stream of page
    updates (by component, from values by name: ``Page.values``) for one answer."""

    def __init__(self, service: ChatService, page: Page):
        self.service = service
        self.registry = service.registry
        self.settings = service.settings
        self.page = page
        self._live: dict[str, _Live] = {}
        """Each session's streaming answer (Stop waits for it to end, then marks what was shown)."""
        self._renders: OrderedDict[str, Render] = OrderedDict()
        """Each session's last render for an answer, for its panels (``PAGE_RENDERS_KEPT`` sessions at most)."""
        self._serial = itertools.count(1)
        self.not_sent: Callable[[str, str], str] = lambda session, why: f"**not sent**: {why}"
        """Note a send refused before the engine had it (the session, why); the note beside the box."""

    def stop(self, session: str) -> None:
        """Stop ``session``'s answer, if one streams (none: the answer had ended, and Stop changes nothing)."""
        live = self._live.get(session)
        if live is not None:
            live.stop()

    def render(self, session: str) -> Render | None:
        """``session``'s last render for an answer (None: none yet, or forgotten)."""
        return self._renders.get(session)

    def live(self, session: str) -> bool:
        """Whether ``session`` has an answer streaming (or waiting for its render or engine)."""
        return session in self._live

    def forget(self, session: str) -> None:
        """Drop ``session``'s last render (its conversation changed: Undo, Clear)."""
        self._renders.pop(session, None)

    async def answer(self, before: Conversation, exchange: Exchange, request: ChatRequest, box: Any = None,
                     session: str | None = None, marks: dict[str, float] | None = None, sent: float | None = None,
                     caller: gr.Request | None = None):
        """Stream the answer to ``exchange`` after ``before``; yields page updates, grouped by time (the first at
        once); the conversation state is set by the first update and the last (``text_update`` leaves it out), the
        last as the answer was shown, so a stopped answer stays as it was shown.

        ``box``: the message box's value the question was sent from (None: a Retry, which takes nothing from the
        box). The box is cleared once the engine has the question (its render: ``Rendered``); a refusal before that
        (a limit, no room in the context) takes the question out of the chat again, leaves the box and the panels as
        they were, and says why beside the box; a failure after it (only the engine could refuse) stays in the chat
        as a failed turn with its note, and the question goes back into the box to edit. Either raises the
        one-line error (the API's, the page's toast).

        Each streamed update repeats the panels' values rather than leaving them out: Gradio turns an output left
        out of a dict into a property update, and rebuilds that component's configuration (its JSON schema
        included) on every update, which cost more than the rest of the update together; repeated values reach the
        browser as an empty diff (a State left out costs nothing: its update has no value). ``marks`` gathers the
        wall-clock times of the steps to the first answer text (the final ``stats_data`` carries them); ``sent``
        (``time.perf_counter()``): when the person sent it, from which a wait for an engine is counted; ``caller``: the
        event's request (a refusal is a program's error, a person's toast: ``refuse``)."""
        conversation = before.ask(exchange)
        live = _Live(conversation)
        if session:
            self._live[session] = live
        try:
            async for update in self._answer(before, conversation, request, box, live,
                                             marks if marks is not None else {}, session or "", sent, caller):
                yield update
        finally:  # ended, failed or cancelled (Stop, a closed tab)
            if session and self._live.get(session) is live:
                del self._live[session]

    async def _answer(self, before: Conversation, conversation: Conversation, request: ChatRequest, box: Any,
                      live: _Live, marks: dict[str, float], session: str, sent: float | None,
                      caller: gr.Request | None):
        page = self.page
        last = 0.0
        boxes: Boxes | PageBoxes | None = None
        seen: tuple[Any, ...] = ()
        as_document = document_view(None, request)
        found = self.service.profile(request.model)  # (resolved once: handed to every step below)
        engine_has_it = False
        # At once: the question in the chat, what happens now on the stats line, and Stop (a wait for an engine can
        # be stopped too); the box and the panels stay as they are until the question is rendered
        shown: dict[str, Any] = streaming_values(stats_data(None, "rendering")) | {
            "stats": sent_text(self.service, request.model), "message_note": ""}
        yield page.values(**shown, chat=chat_messages(live.shown(conversation)))
        async with contextlib.aclosing(self.service.chat(request, preview=True, sent=sent)) as events:
            async for event in live.events(events):
                if isinstance(event, Failed):
                    if not engine_has_it:  # refused in place: the chat as it was, the question still in the box
                        yield page.values(**shown | {"chat": chat_messages(before), "stats": "", "stop_btn": STOP_OFF,
                                                     "message_note": self.not_sent(session, event.message),
                                                     "stats_data": stats_data(None, "refused")}) | {
                            page.conversation: live.shown(before)}
                        refuse(caller, event.message)
                        return
                    conversation = conversation.with_last(status="failed", note=event.message)
                    yield page.values(**shown | {"chat": chat_messages(conversation), "stats": "", "stop_btn": STOP_OFF,
                                                 "stats_data": stats_data(None, "failed")}) | {
                        page.conversation: live.shown(conversation),
                        page.rendered: (next(self._serial), box if box is not None else False)}  # back to edit
                    refuse(caller, event.message)
                    return
                if isinstance(event, Rendered):
                    engine_has_it = True
                    marks["rendered"] = time.time()
                    as_sent = dataclasses.replace(request, sampling=event.sampling or request.sampling)  # as the engine
                    rendered = self._keep_render(session, Render(as_sent, event.inspection, event.pages))  # got it
                    shown = streaming_values(stats_data(None, "streaming")) | {
                        "message_note": "", "stats": rendered_text(self.service, request.model, event.inspection)}
                    boxes = Boxes.of(found, request, event.inspection)
                    seen = event.inspection.items.get("image", ())[-1:]  # the page (or picture) read
                    as_document = document_view(found, request)
                    marks["panels"] = time.time()  # handed to the panels' own event (drawn there, in parallel)
                    yield page.values(**shown, chat=chat_messages(conversation)) | {  # the box cleared, the panels
                        page.conversation: live.shown(conversation), page.rendered: (rendered, box is not None)}
                elif isinstance(event, Waiting | Prefilling):
                    live.stats = Figures(wait_s=event.waited_s)
                    said = waiting_text(event) if isinstance(event, Waiting) else prefill_text(event)
                    yield page.values(**shown | {"stats": said, "stats_data": stats_data(
                        live.stats, "waiting" if isinstance(event, Waiting) else "prefill"),
                        "chat": chat_messages(conversation)}) | {page.conversation: live.shown(conversation)}
                elif isinstance(event, Delta):
                    conversation = conversation.with_last(answer=event.answer, reasoning=event.reasoning,
                                                          document=as_document(event.answer, event.pages))
                    live.stats = event.figures
                    now = time.perf_counter()
                    if now - last >= self.settings.ui_update_interval_s:
                        last = now
                        conversation, shown = await _with_boxes(boxes, conversation, shown, event.pages)
                        marks.setdefault("first_text", time.time())
                        yield text_update(page, shown, live.shown(conversation), live.stats)
                elif isinstance(event, Done):
                    stats = stats_of(event)
                    conversation = conversation.with_last(answer=event.answer, status="done", stats=stats,
                                                          reasoning=event.reasoning,
                                                          document=as_document(event.answer, event.pages))
                    conversation, shown = await _with_boxes(boxes, conversation, shown, event.pages)
                    read = ([(p.vision, p.figures.tokens) for p in event.pages] if event.pages else
                            [(e, event.figures.tokens) for e in seen])
                    reading = reading_text(found.adapter, read)
                    yield page.values(**shown | {"chat": chat_messages(conversation),
                                                 "stats": stats_text(stats) + (f" · {reading}" if reading else ""),
                                                 "stats_data": stats_data(stats, "done", marks), "stop_btn": STOP_OFF}
                                      ) | {page.conversation: live.shown(conversation)}
        if live.stopped and not engine_has_it:  # stopped before it was rendered: nothing was sent, nothing changes
            yield page.values(**shown | {"chat": chat_messages(before), "stats": "stopped before it was sent",
                                         "stats_data": stats_data(None, "stopped"), "stop_btn": STOP_OFF}
                              ) | {page.conversation: before}
        elif live.stopped:  # the answer as far as it was shown, marked (the stream's last update: Gradio repeats it)
            stopped = live.conversation.settled().with_last(stats=live.stats)
            yield page.values(**shown | {"chat": chat_messages(stopped), "stats": stats_text(live.stats, True),
                                         "stats_data": stats_data(live.stats, "stopped"), "stop_btn": STOP_OFF}
                              ) | {page.conversation: stopped}

    def _keep_render(self, session: str, render: Render) -> int:
        """Keep ``render`` as ``session``'s last; returns its serial number."""
        self._renders[session] = render
        self._renders.move_to_end(session)
        while len(self._renders) > PAGE_RENDERS_KEPT:
            self._renders.popitem(last=False)
        return next(self._serial)
