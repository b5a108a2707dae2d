"""The model picker's events: a pick (the new model's controls, sampling and Detect at once, its engine starting; one
this machine cannot start put back with why), the wait for a start, the status line each tick, and the model a new
tab opens on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..errors import VlmDemoError
from ..service import ChatService
from ..settings import STATUS_EVERY_S
from .contract import has_grounding, max_tokens_limit, reader_tasks
from .controls import user_error
from .layout import Page
from .renders import _session
from .status import refusal_text, state_text


class Picker:
    """The model picker's events over the chat service (values out by component, as ``Handlers``')."""

    def __init__(self, service: ChatService, page: Page, stop: Callable[[str], None]):
        self.service = service
        self.registry = service.registry
        self.page = page
        self.stop = stop
        """Stop a session's answer (a switch stops it, as Stop does)."""

    async def load_model(self, name: str) -> str:
        """Start (or switch to) the model's engine (the ``/load_model`` API); the page's status line follows the
        start through ``tick``."""
        try:
            await self.service.start(name)
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        return state_text(self.service, name)

    def state_text(self, name: str) -> str:
        return state_text(self.service, name)

    def tick(self, name: str) -> dict[Any, Any]:
        """The status line now (every ``STATUS_EVERY_S``: each second while the engine starts, else a few: another
        tab's switch may stop this model's engine)."""
        starting = self.service.start_progress(name) is not None
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
        self.stop(_session(request))
        found = self.service.profile(name)  # (once a switch)
        spec = found.spec
        await self.service.pick(name)  # the one used last; its engine starting (``load_model`` waits for it)
        return {**dict(zip(page.controls.components, page.controls.updates(name), strict=True)),
                page.temperature: spec.sampling.temperature, page.top_p: spec.sampling.top_p,
                page.max_tokens: gr.update(value=spec.sampling.max_tokens, maximum=max_tokens_limit(spec)),
                page.detect: gr.update(visible=has_grounding(found)),
                page.task: gr.update(choices=reader_tasks(found), value=None, visible=bool(reader_tasks(found))),
                page.model_a: name, page.model_b: name,
                page.engine_state: state_text(self.service, name, starting=True),
                page.timer: gr.Timer(STATUS_EVERY_S[0]), page.current: name, page.model_note: ""}

    def opened(self, name: str) -> dict[Any, Any]:
        """A new tab (or a reload): on the model whose engine was used last, where one runs or starts (its status is
        every tab's); else on the page's own start-up model ``name``."""
        running = self.service.current_model()
        if running in self.registry.names and not self.registry.get(running).remote:
            name = running
        return {self.page.model: name, self.page.engine_state: state_text(self.service, name)}
