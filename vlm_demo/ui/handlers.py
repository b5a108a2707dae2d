"""What the page's events do: each handler an async function over the chat service, taking the page's values and
returning updates by component (``Page.values``); an answer streams through ``stream.Answers``."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from .. import intake
from ..conversation import Conversation, Exchange, chat_messages
from ..errors import InputError, VlmDemoError
from ..inspector.audit import UNCHECKED, Verdict
from ..intake import DocumentOptions
from ..service import ChatRequest, ChatService, Turn, detect_request, page_requests
from ..service.audit import Auditor
from ..service.costs import DEFAULT_QUESTION, document_cost
from ..settings import ATTACHMENTS_CHECKED, PAGE_RENDERS_KEPT, STATUS_EVERY_S
from .chat_request import chat_request, read_message
from .contract import RENDER_OUTPUTS, has_grounding, max_tokens_limit, reader_tasks, task_prompt
from .controls import Controls, from_the_page, refuse, user_error
from .layout import Page
from .stream import STOP_OFF, Answers
from .views import audit_html, pages_view, panels, refusal_text, rendered_view, state_text, unsendable


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
        self._auditors: dict[str, Auditor] = {}
        """Each endpoint model's audits (its reference renderer, built at the first)."""
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

    def request(self, model: str, turns: Sequence[Turn], system: str, sampling: Sequence[Any],
                controls: Mapping[str, Any], control_set: Controls | None = None) -> ChatRequest:
        """The typed request for the page's values (``controls``: the event's control inputs by name, read by
        ``control_set``: the main picker's unless given)."""
        return chat_request(self.registry, control_set or self.page.controls, model, turns, system, sampling,
                            controls)

    # -- events

    async def panels(self, request: gr.Request, rendered: Any) -> dict[Any, Any]:
        """The panels and Export of the render the session's last answer was generated from (the ``/panels``
        API; on the page, shown as soon as that answer's render is there)."""
        render = self.answers.render(_session(request))
        if render is None:
            return self.page.values(prompt="", runs="", table=[], gallery=[], budget="", export_json="",
                                    export_curl="", export_py="")
        if render.view is None:  # drawn once, in a worker thread
            view = await asyncio.to_thread(rendered_view, self.service, render.request, render.inspection,
                                           render.pages)
            if self.registry.get(render.request.model).remote:  # the server's render held to the reference's
                view["prompt"] = audit_html(await self.audit(render.request)) + view["prompt"]
            render.view = view
        return self.page.values(**{name: render.view[name] for name in RENDER_OUTPUTS} | {
            "gallery": opened(render.view["gallery"])})

    async def audit(self, request: ChatRequest) -> Verdict:
        """An endpoint model's answer's request audited (``service.audit``) as the page sent it; a failure to
        check is the verdict's (the answer stands)."""
        name = request.model
        try:
            auditor = self._auditors.get(name) or Auditor.of(self.registry, name, self.service.engines,
                                                             self.settings)
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
                asked = detect_request(asked, self.registry.get(model), detect)
                user = asked.turns[-1]
                shown = (*shown[:-1], user.text + shown[-1][len(typed):])  # as the model gets it (URL lines kept)
            await asyncio.to_thread(self.service.check, asked)
        except VlmDemoError as exc:  # refused in place: said beside the box, the question stays in it
            yield {self.page.message_note: f"**not sent**: {exc}"}
            refuse(request, str(exc))
            return
        self._sent[session] = True  # (the box emptied as the question is rendered renders no panel)
        self._refused.pop(session, None)  # (the notes on files refused and on the task go with the question)
        self._task_notes.pop(session, None)
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
            yield {self.page.message_note: f"**not sent**: {exc}"}
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
        self._outdate_renders(_session(request))
        conversation = _conversation(conversation).undo()
        return self.page.values(chat=chat_messages(conversation), stats="", boxes=[], export_json="", export_curl="",
                                export_py="") | {self.page.conversation: conversation}

    def clear(self, request: gr.Request) -> dict[Any, Any]:
        """Start a new conversation (the ``/clear`` API)."""
        self._outdate_renders(_session(request))
        return self.page.values(chat=[], prompt="", runs="", table=[], gallery=[], budget="", stats="", boxes=[],
                                export_json="", export_curl="", export_py="") | {self.page.conversation: Conversation()}

    def _outdate_renders(self, session: str) -> None:
        """The conversation changed under the panels (Undo, Clear): the session's answer render is forgotten, and a
        render asked for before (a control moved just before) is dropped when it ends, not shown over the panels
        of the conversation as it is now."""
        self.answers.forget(session)
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
        said = quiet or from_the_page(request)
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
        return view | {self.page.message_note: self._note(session)}

    def _note(self, session: str) -> str:
        """The note beside the message box: the files refused from it (until the message is sent) and why the
        message as it stands could not be sent."""
        said = [self._task_notes.get(session, ""), self._refused.get(session, ""),
                f"**cannot be sent**: {problem}" if (problem := self._problems.get(session)) else ""]
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
                raise InputError("add an image and a question first")
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

    async def load_model(self, name: str) -> str:
        """Start (or switch to) the model's engine (the ``/load_model`` API); the page's status line follows the
        start through ``tick``."""
        try:
            await self.service.engines.get(self.registry.get(name))
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        return state_text(self.service, name)

    def state_text(self, name: str) -> str:
        return state_text(self.service, name)

    def tick(self, name: str) -> dict[Any, Any]:
        """The status line now (every ``STATUS_EVERY_S``: each second while the engine starts, else a few: another
        tab's switch may stop this model's engine)."""
        starting = self.service.engines.progress(name) is not None
        return {self.page.engine_state: state_text(self.service, name),
                self.page.timer: gr.Timer(STATUS_EVERY_S[0] if starting else STATUS_EVERY_S[1])}

    def switch_outputs(self) -> list[Any]:
        """What a model switch updates (``switch``'s outputs)."""
        page = self.page
        return [*page.controls.components, page.temperature, page.top_p, page.max_tokens, page.detect, page.task,
                page.model_a,
                page.model_b, page.engine_state, page.timer, page.model, page.current, page.model_note]

    async def switch(self, request: gr.Request, name: str, current: str) -> dict[Any, Any]:
        """The page as the model picker moved to ``name`` from ``current``: its controls (property updates of the
        components built with the page), its sampling defaults, Detect where its family has a box format, Compare's
        pickers on it, and its engine's status, starting at once: the start begins here (``load_model`` then waits
        for it and says how it ended), so no status tick in between finds it not loaded. The session's answer, if
        one runs (or waits for the other model's engine), stops as Stop stops it: the message box is free for the
        next question, to this model. A model this machine cannot start is refused in place: the picker goes back
        to ``current``, whose engine and answer are left alone, and the note under it says why."""
        page = self.page
        if name == current or name not in self.registry.names:  # the picker as it was (a refused pick put back)
            return {page.engine_state: state_text(self.service, current), page.timer: gr.Timer(STATUS_EVERY_S[1])}
        found = await asyncio.to_thread(self.service.availability, name)
        if not found.runnable:
            return {page.model: current, page.model_note: refusal_text(self.service, name, found.reason),
                    page.engine_state: state_text(self.service, current)}
        self.answers.stop(_session(request))
        spec = self.registry.get(name)
        self.service.engines.touch(name)  # a running engine picked is the one used last (a new tab opens on it)
        if not spec.remote and self.service.engines.running(spec) is None:
            started = asyncio.ensure_future(self.service.engines.get(spec))
            started.add_done_callback(lambda t: t.cancelled() or t.exception())  # (load_model reports a failure)
            await asyncio.sleep(0)  # the start takes its first step: its progress is there
        return {**dict(zip(page.controls.components, page.controls.updates(name), strict=True)),
                page.temperature: spec.sampling.temperature, page.top_p: spec.sampling.top_p,
                page.max_tokens: gr.update(value=spec.sampling.max_tokens, maximum=max_tokens_limit(spec)),
                page.detect: gr.update(visible=has_grounding(spec)),
                page.task: gr.update(choices=reader_tasks(spec), value=None, visible=bool(reader_tasks(spec))),
                page.model_a: name, page.model_b: name,
                page.engine_state: state_text(self.service, name, starting=True),
                page.timer: gr.Timer(STATUS_EVERY_S[0]), page.current: name, page.model_note: ""}

    def task(self, request: gr.Request, task: str | None, model: str, message: Any) -> Any:
        """A reader's task picked: its prompt into the message box's text (the files attached kept), to be edited or
        sent as it is; a task whose checkpoint reads the page alone (no text: LightOnOCR's) says so beside the box."""
        prompt = task_prompt(self.registry.get(model), task or "") if model in self.registry.names else None
        if prompt is None:
            return gr.skip(), gr.skip()
        session = _session(request)
        self._task_notes[session] = "" if prompt else (
            f"**{task}** sends no text: {self.registry.get(model).label} reads the page alone; attach a page or a "
            "PDF and send it as it is")
        message = message if isinstance(message, dict) else {}
        return {"text": prompt, "files": message.get("files", []) or []}, self._note(session)

    def opened(self, name: str) -> dict[Any, Any]:
        """A new tab (or a reload): on the model whose engine was used last, where one runs or starts (its status is
        every tab's); else on the page's own start-up model ``name``."""
        running = self.service.engines.current()
        if running in self.registry.names and not self.registry.get(running).remote:
            name = running
        return {self.page.model: name, self.page.engine_state: state_text(self.service, name)}

    async def attachments(self, request: gr.Request, message: Any) -> dict[Any, Any]:
        """The message box changed: files just attached are checked as a question would take them (one that would
        be refused leaves the box at once, no broken thumbnail, and the note beside the box says which and why until
        the message is sent; each file is checked once: a keystroke changes the box too), and the files kept are the
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
        sent = self._sent.pop(session, False)
        out: dict[Any, Any] = {} if sent and not kept else {self.page.attached: kept}  # (emptied by a send: no render)
        if refused := [self._checked[p] for p in files if self._checked.get(p)]:
            out[self.page.message] = {"text": message.get("text", ""), "files": [
                f for f, path in zip(entries, files, strict=True) if not self._checked.get(path)]}
            self._refused[session] = "**refused**: " + " · ".join(refused)
            out[self.page.message_note] = self._note(session)
        return out

    async def attached(self, request: gr.Request, *, message, conversation, model, system, urls,
                       **controls) -> dict[Any, Any]:
        """A file attached, replaced or removed: the panels as ``follow`` renders them; nothing while the session's
        answer runs (its own render is in the panels)."""
        if self.answers.live(_session(request)):
            return gr.skip()
        return await self.follow(request, message=message, conversation=conversation, model=model, system=system,
                                 urls=urls, **controls)

    async def follow(self, request: gr.Request, *, message, conversation, model, system, urls,
                     **controls) -> dict[Any, Any]:
        """The panels after a switch, an Undo or a file attached, replaced or removed: vLLM's render (without an
        engine, where it is not running) of the conversation and the typed message, as Inspect only shows it; empty
        when there is nothing to render, and a refusal (too many pages, a video for a model without video) said in
        the prompt panel and beside the box, not as an error."""
        return await self._latest(request, message, conversation, model, system, urls, controls, quiet=True)


def _session(request: gr.Request) -> str:
    """The event's session (its answer and render are the session's own)."""
    return getattr(request, "session_hash", None) or ""


def opened(gallery: list[Any]) -> Any:
    """A gallery's pictures with the first one open, whole (Gradio shows new pictures as a grid of square cells,
    which cut a wide picture and its grid; ``preview`` holds only for the value given at build time)."""
    return gr.update(value=gallery, selected_index=0) if gallery else []


def _box(message: Any) -> dict[str, Any]:
    """The message box's value as sent (its text and files), to put back where the question was not answered."""
    message = message if isinstance(message, dict) else {}
    return {"text": message.get("text", "") or "", "files": list(message.get("files", []) or [])}


def _conversation(value: Any) -> Conversation:
    """The session's conversation (a new session's state may still be Gradio's empty default)."""
    return value if isinstance(value, Conversation) else Conversation()

