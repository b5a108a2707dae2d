"""The page's renders without an answer: the panels as the message, its files and the controls change (and after a
switch or an Undo), Inspect only, Compare and what a document will cost; the note beside the message box that says
what would refuse the message as it stands. Each session's latest render is the one shown."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gradio as gr

from .. import intake
from ..conversation import Conversation
from ..errors import InputError, VlmDemoError
from ..intake import DocumentOptions
from ..service import ChatRequest, ChatService, Turn, page_requests
from ..service.document_cost import DEFAULT_QUESTION, document_cost
from ..settings import ATTACHMENTS_CHECKED, PAGE_RENDERS_KEPT
from .chat_request import chat_request, read_message
from .contract import task_prompt
from .controls import Controls, from_the_page, user_error
from .layout import Page
from .panels import pages_view, panels, unsendable


class Renders:
    """The page's renders without an answer, each an async function over the chat service (values in and out by
    name, as ``Handlers``'), and each session's notes beside the message box."""

    def __init__(self, service: ChatService, page: Page, live: Callable[[str], bool]):
        self.service = service
        self.registry = service.registry
        self.settings = service.settings
        self.page = page
        self.live = live
        """Whether a session's answer runs (its own render is in the panels then)."""
        self._inspects: dict[str, int] = {}
        """Per session, how many renders its Inspect and controls have asked for."""
        self._shown: dict[str, int] = {}
        """Per session, the number of the latest of those renders shown."""
        self._controls: dict[str, dict[str, Any]] = {}
        """Per session, the control values of the latest of those renders (a box left unchanged renders nothing)."""
        self._checked: dict[str, str] = {}
        """Files attached to the message box, checked: why each was refused ("" where it was not)."""
        self._refused: dict[str, str] = {}
        """Per session, the note on the files refused from the message box (until the message is sent)."""
        self._sent: dict[str, bool] = {}
        """Per session, that a question was just sent from the message box (which is then emptied: no files removed
        by the person)."""
        self._task_notes: dict[str, str] = {}
        """Per session, what the reader's task picked says beside the box (a task that sends no text)."""
        self._problems: dict[str, str] = {}
        """Per session, why the message as last rendered could not be sent ("" where it can)."""
        self._cleared: set[str] = set()
        """Sessions cleared (Clear) with no question sent since: a render given a conversation with exchanges was
        asked for before the Clear and queued behind it (its serial, taken when it runs, is later than the Clear's)."""
        self._not_sent: dict[str, tuple[str, int]] = {}
        """Per session, why its last send was refused in place, and how many renders it had asked for then."""
        self._emptied: dict[str, bool] = {}
        """Per session, that the box was emptied by a send: the page's ``attached`` still names the question's files
        (left as they were: their change would be an event that renders nothing), and means none."""

    def request(self, model: str, turns: tuple[Turn, ...], system: str, sampling: tuple[Any, ...],
                controls: Mapping[str, Any], control_set: Controls | None = None) -> ChatRequest:
        """The typed request for the page's values (``controls``: the event's control inputs by name, read by
        ``control_set``: the main picker's unless given)."""
        return chat_request(control_set or self.page.controls, model, turns, system, sampling,
                            controls)

    def sent(self, session: str) -> None:
        """A question left the message box: the notes on its files, its task and a refusal go with it, and the box
        emptied as it is rendered renders no panel."""
        self._refused.pop(session, None)
        self._task_notes.pop(session, None)
        self._not_sent.pop(session, None)
        self._sent[session] = True
        self._cleared.discard(session)

    def not_sent(self, session: str, why: str) -> str:
        """A send refused in place: said beside the box until the next send or a render asked for after it (the
        person moved a control, changed the files: the note then says what that render finds), whatever render
        asked for before ends after it; the note."""
        self._not_sent[session] = (why, self._inspects.get(session, 0))
        return self.note(session)

    def clear(self, session: str) -> None:
        """The conversation was cleared: renders asked for before are dropped (``outdate``), those still queued too."""
        self.outdate(session)
        self._cleared.add(session)

    def outdate(self, session: str) -> None:
        """The conversation changed under the panels (Undo, Clear): a render asked for before (a control moved just
        before) is dropped when it ends, not shown over the panels of the conversation as it is now."""
        if session in self._inspects:
            self._shown[session] = self._inspects[session] + 1

    async def to_inspect(self, message, conversation, urls, documents: DocumentOptions) -> tuple[Turn, ...]:
        """The turns to inspect: the conversation with the typed message (its documents read as ``documents``
        says), or else up to its last question."""
        conversation = _conversation(conversation).settled()
        user, _ = await read_message(message, urls, self.settings, documents)
        if user.text or user.media:
            return (*conversation.turns(), user)
        if conversation.exchanges:
            before, exchange = conversation.retry()
            return (*before.turns(), exchange.user)
        return ()

    async def inspect(self, request: gr.Request, *, message, conversation, model, system, urls,
                      **controls) -> dict[Any, Any]:
        """Render and expand without generating (the ``/inspect`` API and Inspect only): a refusal is the API's error
        (on the page: said in the panel and beside the box, and a toast). Two renders asked one after the other render
        at once; a render that ends after a later one of the same session has been shown is dropped, so the panels
        show the last ask."""
        return await self._latest(request, message, conversation, model, system, urls, controls, quiet=False)

    async def moved(self, request: gr.Request, *, message, conversation, model, system, urls,
                    **controls) -> dict[Any, Any]:
        """A control moved: the panels render again as ``inspect`` does; what would refuse the message as it stands
        (a page outside the document, too many pages, no room in the context) is said in the panel and beside the
        box, not as an error."""
        return await self._latest(request, message, conversation, model, system, urls, controls, quiet=True)

    async def left(self, request: gr.Request, *, message, conversation, model, system, urls,
                   **controls) -> dict[Any, Any]:
        """A box left (the pages box): rendered as ``moved`` does where its value differs from the session's last
        render; else nothing (Enter in it rendered already, and a click on Clear or Undo, which leaves it, would
        render the conversation as it was before them, over the panels of the conversation as it is)."""
        if self._controls.get(_session(request)) == controls:
            return gr.skip()
        return await self.moved(request, message=message, conversation=conversation, model=model, system=system,
                                urls=urls, **controls)

    async def follow(self, request: gr.Request, *, message, conversation, model, system, urls,
                     **controls) -> dict[Any, Any]:
        """The panels after a switch, an Undo or a file attached, replaced or removed: vLLM's render (without an
        engine, where it is not running) of the conversation and the typed message, as Inspect only shows it; empty
        when there is nothing to render, and a refusal (too many pages, a video for a model without video) said in
        the prompt panel and beside the box, not as an error."""
        return await self._latest(request, message, conversation, model, system, urls, controls, quiet=True)

    async def attached(self, request: gr.Request, *, message, conversation, model, system, urls,
                       **controls) -> dict[Any, Any]:
        """A file attached, replaced or removed: the panels as ``follow`` renders them; nothing while the session's
        answer runs (its own render is in the panels)."""
        session = _session(request)
        if self.live(session):
            return gr.skip()
        return await self.follow(request, message=message, conversation=conversation, model=model, system=system,
                                 urls=urls, **controls)

    async def attachments(self, request: gr.Request, message: Any, attached: str) -> dict[Any, Any]:
        """The message box changed: files just attached are checked as a question would take them (one that would
        be refused leaves the box at once, no broken thumbnail, and the note beside the box says which and why until
        the message is sent or the person empties the box; each file is checked once: a keystroke changes the box too), and the files kept are the
        session's ``Page.attached``, whose change (a file attached, replaced or removed; not a keystroke, nor the box
        emptied as its question is sent) renders the panels (``attached``)."""
        session = _session(request)
        message = message if isinstance(message, dict) else {}
        entries = message.get("files", []) or []
        files = [f if isinstance(f, str) else (f or {}).get("path", "") for f in entries]
        for path in files:
            if path and path not in self._checked:
                try:
                    await intake.check_file(path, self.settings, name=Path(path).name)
                    self._checked[path] = ""
                except VlmDemoError as exc:
                    self._checked[path] = str(exc)
                while len(self._checked) > ATTACHMENTS_CHECKED:
                    self._checked.pop(next(iter(self._checked)))
        kept = "\n".join(p for p in files if p and not self._checked.get(p))
        out: dict[Any, Any] = {self.page.attached: self._attached(session, kept, attached)}
        if refused := [self._checked[p] for p in files if self._checked.get(p)]:
            out[self.page.message] = {"text": message.get("text", ""), "files": [
                f for f, path in zip(entries, files, strict=True) if not self._checked.get(path)]}
            self._refused[session] = "**refused**: " + " · ".join(refused)
            out[self.page.message_note] = self.note(session)
        elif not files and not (message.get("text") or "").strip() and self._refused.pop(session, None):
            out[self.page.message_note] = self.note(session)  # (the person emptied the box: the draft is gone)
        return out or {self.page.attached: gr.skip()}  # (a dict of no component is one value to Gradio)

    def _attached(self, session: str, kept: str, attached: str) -> Any:
        """``Page.attached``'s new value for the files the box keeps (``kept``), ``gr.skip()`` where it renders
        nothing: a keystroke (the same files), and the box emptied by a send, whose files are the question's now (the
        answer's render shows them): ``attached`` is left naming them (their change to none would be a queued event
        that renders nothing: 13 ms of CPU a question), and means none until the box's files change. The same files
        attached again then (an upload of the same content has the same path) are written with a trailing newline
        where the page's value has none, or without it, so that they change it; the question's files put back where
        the engine refused it stay as shown."""
        attached = attached or ""
        shown = attached.rstrip("\n")
        if self._sent.pop(session, False) and not kept and attached:
            self._emptied[session] = True
            return gr.skip()
        if self._emptied.get(session) and (not kept or (kept == shown and session in self._not_sent)):
            if kept:
                del self._emptied[session]
            return gr.skip()
        if not self._emptied.pop(session, False):
            return gr.skip() if kept == shown else kept
        return kept if kept != attached else kept + "\n"

    def task(self, request: gr.Request, task: str | None, model: str, message: Any) -> Any:
        """A reader's task picked: its prompt into the message box's text (the files attached kept), to be edited or
        sent as it is; a task whose checkpoint reads the page alone (no text: LightOnOCR's) says so beside the box."""
        prompt = task_prompt(self.service.profile(model), task or "") if model in self.registry.names else None
        if prompt is None:
            return gr.skip(), gr.skip()
        session = _session(request)
        self._task_notes[session] = "" if prompt else (
            f"**{task}** sends no text: {self.registry.get(model).label} reads the page alone; attach a page or a "
            "PDF and send it as it is")
        message = message if isinstance(message, dict) else {}
        return {"text": prompt, "files": message.get("files", []) or []}, self.note(session)

    async def _latest(self, request: gr.Request, message, conversation, model, system, urls,
                      controls: Mapping[str, Any], quiet: bool) -> dict[Any, Any]:
        """The panels of the session's latest render (see ``inspect``); ``quiet`` (a control moved, a file attached, a
        switch): a refusal is said in place, nothing to render empties the panels."""
        session = _session(request)
        serial = self._inspects[session] = self._inspects.pop(session, 0) + 1  # (re-inserted: the most recent last)
        self._controls[session] = dict(controls)
        while len(self._inspects) > PAGE_RENDERS_KEPT:  # sessions gone long ago
            oldest = next(iter(self._inspects))
            del self._inspects[oldest]
            self._shown.pop(oldest, None)
            self._controls.pop(oldest, None)
            self._problems.pop(oldest, None)
            self._refused.pop(oldest, None)
            self._task_notes.pop(oldest, None)
            self._sent.pop(oldest, None)
            self._not_sent.pop(oldest, None)
            self._emptied.pop(oldest, None)
            self._cleared.discard(oldest)
        if session in self._cleared and _conversation(conversation).exchanges:  # (asked for before the Clear)
            return gr.skip()
        said = quiet or from_the_page(request)
        if session in self._not_sent and self._not_sent[session][1] < serial:  # (a render asked for since)
            del self._not_sent[session]
        try:
            view = await self._shown_view(session, message, conversation, model, system, urls, controls, quiet, said)
        except VlmDemoError as exc:
            if self._shown.get(session, 0) > serial:
                return gr.skip()
            self._problems[session] = str(exc)
            raise user_error(str(exc)) from None
        if self._shown.get(session, 0) > serial:
            return gr.skip()
        self._shown[session] = serial
        if said and not quiet and self._problems.get(session):  # Inspect only, on the page: a toast too
            gr.Warning(self._problems[session])
        return view

    async def _shown_view(self, session: str, message, conversation, model, system, urls,
                          controls: Mapping[str, Any], quiet: bool, said: bool) -> dict[Any, Any]:
        """The panels of the inspected conversation and, beside the box, why its message could not be sent as it
        stands ("" where it can); ``quiet``: nothing to render empties the panels (else the stats line asks for a
        question); ``said``: a refusal is said in the prompt panel and beside the box (raised otherwise)."""
        try:
            view, problem = await self._inspect(message, conversation, model, system, urls, controls, quiet)
        except VlmDemoError as exc:
            if not said:
                raise
            view = self.page.values(prompt=f'<p class="render-note">{html.escape(str(exc))}</p>', runs="",
                                    table=[], gallery=[], budget="")
            problem = str(exc)
        self._problems[session] = problem
        return view | {self.page.message_note: self.note(session)}

    def note(self, session: str) -> str:
        """The note beside the message box: the files refused from it (until the message is sent) and why the
        message as it stands could not be sent."""
        refused, problem = self._not_sent.get(session), self._problems.get(session)
        said = [self._task_notes.get(session, ""), self._refused.get(session, ""),
                f"**not sent**: {refused[0]}" if refused else "",
                # (the reason once: a send refused for what the message as it stands cannot do)
                f"**cannot be sent**: {problem}" if problem and (not refused or refused[0] != problem) else ""]
        return " · ".join(s for s in said if s)

    async def _inspect(self, message, conversation, model, system, urls, controls: Mapping[str, Any],
                       quiet: bool) -> tuple[dict[Any, Any], str]:
        """The panels of the inspected conversation, and why the message could not be sent as it stands (no room
        in the context; "" where it can); ``quiet``: nothing to render empties the panels (else the stats line asks
        for a question). A refusal is raised as it is."""
        turns = await self.to_inspect(message, conversation, urls, self.page.controls.documents(controls))
        if not turns:
            if quiet:
                return self.page.values(prompt="", runs="", table=[], gallery=[], budget=""), ""
            return self.page.values(stats="add an image or a question to inspect"), ""
        request = self.request(model, turns, system, (0.0, 1.0, 1, None), controls)
        if request.each_page:  # each page's own request, as each will be sent
            rendered = [(one, await self.service.inspect(one, start_engine=False)) for _, one in page_requests(request)]
            view = await asyncio.to_thread(pages_view, self.service, rendered)
            inspections = [inspection for _, inspection in rendered]
        else:
            inspection = await self.service.inspect(request, start_engine=False)  # not waiting for an engine start
            view = await asyncio.to_thread(panels, self.service, inspection, request)
            inspections = [inspection]
        return self.page.values(**view | {"gallery": opened(view["gallery"])}), unsendable(inspections)

    async def compare(self, *, message, conversation, urls, model_a, model_b, **controls) -> list[Any]:
        """Inspect the same conversation under two models or settings (the ``/compare`` API; ``controls``: both
        sides' controls, by input name)."""
        outputs: list[Any] = []
        try:
            turns = await self.to_inspect(message, conversation, urls, self.page.controls_a.documents(controls))
            if not turns:
                raise InputError("add a question (and a picture, video, document or clip) first")
            for model, control_set in ((model_a, self.page.controls_a), (model_b, self.page.controls_b)):
                request = self.request(model, turns, "", (0.0, 1.0, 1, None), controls, control_set)
                inspection = await self.service.inspect(request, start_engine=False)
                view = await asyncio.to_thread(panels, self.service, inspection, request)
                outputs += [view["budget"] + view["prompt"], opened(view["gallery"])]
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        return outputs

    async def document_cost(self, document: str, model: str, pages: str = "", dpi: int = 0,
                            question: str = DEFAULT_QUESTION) -> dict[str, Any]:
        """What a PDF (or a picture) will cost a model before anyone sends it: each page's vision tokens as vLLM's
        renderer expands it, as its own request and all pages in one, against the model's context window, with the
        rendered prompt. Nothing is generated and no engine starts.

        Args:
            document: the PDF or picture as a data: URL (data:application/pdf;base64,... or data:image/png;base64,...)
            model: a model name of this app (its models.yaml entries)
            pages: which pages of a PDF, from 1, e.g. "1-3,7" (empty: all, up to the app's max-pages setting)
            dpi: the resolution a PDF's pages are rasterised at, 72-300 (0: the model family's, else 144)
            question: the text asked with it (its tokens count too)
        """
        try:
            return await document_cost(self.service, document, model, pages, dpi, question)
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None


def _session(request: gr.Request) -> str:
    """The event's session (its answer and render are the session's own)."""
    return getattr(request, "session_hash", None) or ""


def opened(gallery: list[Any]) -> Any:
    """A gallery's pictures with the first one open, whole (Gradio shows new pictures as a grid of square cells,
    which cut a wide picture and its grid; ``preview`` holds only for the value given at build time)."""
    return gr.update(value=gallery, selected_index=0) if gallery else []


def _conversation(value: Any) -> Conversation:
    """The session's conversation (a new session's state may still be Gradio's empty default)."""
    return value if isinstance(value, Conversation) else Conversation()
