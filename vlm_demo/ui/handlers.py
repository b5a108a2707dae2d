"""What the page's answer events do (ask, Retry, Stop, Undo, Clear, an answer's panels and an endpoint model's
audit), each an async function over the chat service taking the page's values and returning updates by component
(``Page.values``); an answer streams through ``stream.Answers``. The renders without an answer are ``renders``'
(``Handlers.renders``), the model picker's events ``picker``'s (``Handlers.picker``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from ..conversation import Conversation, Exchange, chat_messages
from ..errors import VlmDemoError
from ..inspector.verdict import UNCHECKED, Verdict
from ..service import ChatRequest, ChatService, Turn, detect_request
from ..service.audit import Auditor
from ..settings import PAGE_RENDERS_KEPT
from .chat_request import read_message
from .contract import EXPORT_OUTPUTS, PANEL_OUTPUTS
from .controls import Controls, refuse
from .layout import Page
from .panels import audit_html, export_view, rendered_view
from .picker import Picker
from .renders import Renders, _conversation, _session, opened
from .stream import STOP_OFF, Answers, Render

NO_EXPORT = dict.fromkeys(EXPORT_OUTPUTS, "")
"""Export's boxes empty (nothing sent yet, or Export closed)."""


class Handlers:
    """What the page's events do, each an async function over the chat service. Values come in by name (the
    contract's ``endpoint_inputs``, as keyword arguments: Gradio's ``inputs_kwargs``; a control's by its input
    name, gathered in ``**controls``) and go out by name (``Page.values``)."""

    def __init__(self, service: ChatService, page: Page):
        self.service = service
        self.registry = service.registry
        self.settings = service.settings
        self.page = page
        self.answers = Answers(service, page)
        self.renders = Renders(service, page, self.answers.live)
        self.answers.not_sent = self.renders.not_sent  # (a send refused in the stream is noted as the page's are)
        """The renders without an answer (the panels as the message and controls change, Inspect, Compare)."""
        self.picker = Picker(service, page, self.answers.stop)
        """The model picker's events."""
        self._auditors: dict[str, Auditor] = {}
        """Each endpoint model's audits (its reference renderer, built at the first)."""
        self._export_open: OrderedDict[str, None] = OrderedDict()
        """The sessions whose Export is open (their answers' panels come with it), the most recent last."""

    def request(self, model: str, turns: Sequence[Turn], system: str, sampling: Sequence[Any],
                controls: Mapping[str, Any], control_set: Controls | None = None) -> ChatRequest:
        """The typed request for the page's values (``controls``: the event's control inputs by name)."""
        return self.renders.request(model, tuple(turns), system, tuple(sampling), controls, control_set)

    # -- events

    async def panels(self, request: gr.Request, rendered: Any) -> dict[Any, Any]:
        """The panels of the render the session's last answer was generated from (the ``/panels`` API; on the page,
        shown as soon as that answer's render is there), with its Export where the session has Export open (else
        Export's boxes empty: ``/export`` builds it)."""
        session = _session(request)
        render = self.answers.render(session)
        if render is None:
            return self.page.values(prompt="", runs="", table=[], gallery=[], budget="", **NO_EXPORT)
        if render.view is None:  # drawn once, in a worker thread
            view = await asyncio.to_thread(rendered_view, self.service, render.request, render.inspection,
                                           render.pages)
            if self.registry.get(render.request.model).remote:  # the server's render held to the reference's
                view["prompt"] = audit_html(await self.audit(render.request)) + view["prompt"]
            render.view = view
        exported = await self._export(render) if session in self._export_open else NO_EXPORT
        return self.page.values(**{name: render.view[name] for name in PANEL_OUTPUTS} | exported | {
            "gallery": opened(render.view["gallery"])})

    async def export(self, request: gr.Request) -> dict[Any, Any]:
        """Export of the render the session's last answer was generated from (the ``/export`` API; on the page, as
        Export opens, and with each answer's panels while it stays open): built once a render, the pictures
        encoded as PNG data URLs; empty before an answer."""
        session = _session(request)
        self._export_open[session] = None
        self._export_open.move_to_end(session)
        while len(self._export_open) > PAGE_RENDERS_KEPT:
            self._export_open.popitem(last=False)
        render = self.answers.render(session)
        return self.page.values(**(await self._export(render) if render is not None else NO_EXPORT))

    def export_closed(self, request: gr.Request) -> None:
        """Export closed on the page: the session's answers no longer build it."""
        self._export_open.pop(_session(request), None)

    async def _export(self, render: Render) -> dict[str, str]:
        if render.export is None:  # built once, in a worker thread
            render.export = await asyncio.to_thread(export_view, self.service, render.request)
        return render.export

    async def audit(self, request: ChatRequest) -> Verdict:
        """An endpoint model's answer's request audited (``service.audit``) as the page sent it; a failure to
        check is the verdict's (the answer stands)."""
        name = request.model
        try:
            auditor = self._auditors.get(name) or self.service.auditor(name)
            self._auditors[name] = auditor
            return await auditor.audit(request, with_defaults=True)
        except VlmDemoError as exc:
            return Verdict(UNCHECKED, "", causes=(str(exc),))

    async def submit(self, request: gr.Request, *, message, conversation, model, system, temperature, top_p,
                     max_tokens, seed, urls, detect, **controls):
        """Ask the message (the ``/chat`` API). What can be refused before anything is rendered (an attachment, a
        limit, a model that cannot start here) is refused at once: the note beside the box says why, and the
        question, its attachments and the panels stay as they are."""
        marks = {"handler": time.time()}
        sent = time.perf_counter()
        session = _session(request)
        try:
            user, shown = await read_message(message, urls, self.settings, self.page.controls.documents(controls))
            marks["read"] = time.time()
            before = _conversation(conversation).settled()
            asked = self.request(model, (*before.turns(), user), system, (temperature, top_p, max_tokens, seed),
                                 controls)
            if (detect or "").strip():  # Detect mode: the family's own question, its answer held to its grammar
                typed = user.text
                asked = detect_request(asked, self.service.profile(model), detect)
                user = asked.turns[-1]
                shown = (*shown[:-1], user.text + shown[-1][len(typed):])  # as the model gets it (URL lines kept)
            await asyncio.to_thread(self.service.check, asked)
        except VlmDemoError as exc:  # refused in place: said beside the box, the question stays in it
            yield {self.page.message_note: self.renders.not_sent(session, str(exc))}
            refuse(request, str(exc))
            return
        self.renders.sent(session)
        async for update in self.answers.answer(before, Exchange(user, shown), asked, box=_box(message),
                                                session=session, marks=marks, sent=sent, caller=request):
            yield update

    async def retry(self, request: gr.Request, *, conversation, model, system, temperature, top_p, max_tokens,
                    seed, detect, **controls):
        """Answer the last message again, whatever became of its answer (the ``/retry`` API); with Detect on,
        held to the family's box grammar again."""
        marks = {"handler": time.time()}
        sent = time.perf_counter()
        marks["read"] = marks["handler"]  # nothing to read: the message is the conversation's own
        try:
            before, exchange = _conversation(conversation).retry()
        except ValueError:
            refuse(request, "nothing to retry yet")
            return
        try:
            asked = self.request(model, (*before.turns(), exchange.user), system,
                                 (temperature, top_p, max_tokens, seed), controls)
            if (detect or "").strip():  # the same question, its answer held to the family's grammar
                asked = dataclasses.replace(asked, detect=detect.strip())
            await asyncio.to_thread(self.service.check, asked)
        except VlmDemoError as exc:
            yield {self.page.message_note: self.renders.not_sent(_session(request), str(exc))}
            refuse(request, str(exc))
            return
        async for update in self.answers.answer(before, exchange, asked, session=request.session_hash, marks=marks,
                                                sent=sent, caller=request):
            yield update

    def stop(self, request: gr.Request) -> Any:
        """Stop the session's answer (the ``/stop`` API): its stream ends at once, aborts the engine request and
        shows the answer as far as it went, marked stopped, as its own last update (nothing later undoes it)."""
        self.answers.stop(_session(request))
        return STOP_OFF

    def undo(self, request: gr.Request, conversation) -> dict[Any, Any]:
        """Remove the last exchange (the ``/undo`` API): its stats line and boxes go with it, Export, which
        replayed its request, empties (the page then shows vLLM's render of what is left: ``follow``)."""
        self._outdate(_session(request))
        conversation = _conversation(conversation).undo()
        return self.page.values(chat=chat_messages(conversation), stats="", boxes=[], **NO_EXPORT) | {
            self.page.conversation: conversation}

    def clear(self, request: gr.Request) -> dict[Any, Any]:
        """Start a new conversation (the ``/clear`` API)."""
        self._outdate(_session(request))
        self.renders.clear(_session(request))
        return self.page.values(chat=[], prompt="", runs="", table=[], gallery=[], budget="", stats="", boxes=[],
                                **NO_EXPORT) | {self.page.conversation: Conversation()}

    def _outdate(self, session: str) -> None:
        """The conversation changed under the panels (Undo, Clear): the session's answer render is forgotten, and a
        render asked for before is dropped when it ends (``Renders.outdate``)."""
        self.answers.forget(session)
        self.renders.outdate(session)


def _box(message: Any) -> dict[str, Any]:
    """The message box's value as sent (its text and files), to put back where the question was not answered."""
    message = message if isinstance(message, dict) else {}
    return {"text": message.get("text", "") or "", "files": list(message.get("files", []) or [])}
