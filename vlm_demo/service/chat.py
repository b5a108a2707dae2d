"""The chat service: one request in, a stream of typed events out.

UI -> ``ChatService.chat(request)`` -> engine -> ``Rendered``, ``Delta``..., then ``Done`` or
``Failed`` -> UI. User-facing errors (``VlmDemoError``) become a ``Failed`` event; nothing leaks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from .. import profile
from ..engine import Availability, EngineManager, RenderedPrompt, Renderer
from ..errors import InputError, VlmDemoError
from ..inspector import Inspection, inspect, prefill_work
from ..intake import Page
from ..registry import Registry, Sampling
from ..settings import WAITING_EVERY_S, Settings
from .audit import Auditor
from .checks import check_mm_kwargs, check_request, sent_media_io
from .detect import detect_sampling
from .pages import each_page, page_requests
from .requests import (ChatRequest, Delta, Done, Event, Failed, Figures, Prefilling, Rendered, Waiting,
                       to_openai_messages)

log = logging.getLogger(__name__)


class ChatService:
    """Validates requests, renders them with the engine and streams answers as events."""

    def __init__(self, registry: Registry, engines: EngineManager, settings: Settings,
                 profiles: profile.Profiles | None = None):
        self.registry = registry
        self.engines = engines
        self.settings = settings
        self.profiles = (profiles if profiles is not None and profiles.registry is registry
                         else profile.Profiles(registry))
        """The models' profiles, each resolved once and kept with its derived controls."""

    def profile(self, name: str) -> profile.Profile:
        """The profile of model ``name``: resolved once (a remote ``family: auto`` entry's once its server says what
        it serves), with its controls where they have been derived."""
        spec = self.registry.get(name)
        return self.profiles.get(spec, self.engines.checkpoint(spec) if spec.remote else None)

    def validate(self, request: ChatRequest) -> profile.Profile:
        """Check the request against the limits; raise ``InputError`` with the reason. Returns its model's profile,
        resolved once for the request and handed down."""
        found = self.profile(request.model)
        check_request(request, found, self.settings)
        return found

    def check(self, request: ChatRequest) -> None:
        """What refuses ``request`` before anything is rendered (``InputError``, one line): the limits (page by page,
        each page's own request) and a model whose engine cannot start here. Reads files and memory: run it in a
        worker thread."""
        for one in [one for _, one in page_requests(request)] if request.each_page else [request]:
            self.validate(one)
        spec = self.registry.get(request.model)
        if not spec.remote and self.engines.running(spec) is None:
            found = self.availability(request.model)
            if not found.runnable:
                raise InputError(f"{spec.label} cannot start here: {found.reason}")

    # -- what the page asks about engines (it holds no engine manager: the service answers)

    def engine_state(self, name: str) -> str:
        """Whether the model's engine is "not loaded", "loading" or "ready" ("remote: URL" for an endpoint)."""
        return str(self.engines.state(name))

    def engine_states(self) -> list[tuple[str, str]]:
        """Every local engine that runs or starts, the one used last first, with its state (what every tab lists)."""
        return self.engines.states()

    def start_progress(self, name: str) -> str | None:
        """Where the start of the model's engine stands, in words with its seconds, while it starts; else None."""
        progress = self.engines.progress(name)
        return progress.text() if progress is not None else None

    def start_failure(self, name: str) -> str | None:
        """Why the model's last start failed, while its engine does not run; else None."""
        return None if self.engine_running(name) else self.engines.failure(name)

    def engine_running(self, name: str) -> bool:
        """Whether the model's engine runs (an endpoint model's server counts as running)."""
        spec = self.registry.get(name)
        return spec.remote or self.engines.running(spec) is not None

    async def start(self, name: str) -> None:
        """Start the model's engine (or reach an endpoint model's server) and wait until it is up."""
        await self.engines.get(self.registry.get(name))

    async def pick(self, name: str) -> None:
        """A person picked ``name``: its engine, running or starting, is the one used last (a new tab opens on it);
        one not running starts now, in the background (its progress is there at once; ``start`` waits for it)."""
        spec = self.registry.get(name)
        self.engines.touch(name)
        if not spec.remote and self.engines.running(spec) is None:
            started = asyncio.ensure_future(self.engines.get(spec))
            started.add_done_callback(lambda t: t.cancelled() or t.exception())  # (``start`` reports a failure)
            await asyncio.sleep(0)  # the start takes its first step: its progress is there

    def current_model(self) -> str | None:
        """The model whose engine was used last (a start counts; not one walked away from), for a new tab."""
        return self.engines.current()

    def model_path(self, name: str) -> str:
        """Where the model's files are on this machine (a tiny model's built directory): what ``vllm serve`` of
        Export starts from."""
        return self.engines.model_path(self.registry.get(name))

    def auditor(self, name: str) -> Auditor:
        """The auditor of endpoint model ``name`` (its server's render held to vLLM's reference renderer)."""
        return Auditor.of(self.registry, name, self.engines, self.settings, profiles=self.profiles)

    async def controls(self, name: str) -> profile.Profile:
        """The model's profile with its controls known: for an entry that offers none, its processor's
        (derived with vLLM's renderer of the model; no engine starts)."""
        return self.profiles.keep(await self.engines.derived_profile(self.profile(name)))

    def availability(self, name: str) -> Availability:
        """Whether the model can start on this machine now, and why not (no engine, no renderer)."""
        return self.engines.availability(self.registry.get(name))

    def derive_controls(self) -> None:
        """Derive the controls of every registry model whose entry offers none (the page shows each model's
        controls from its start); a model whose renderer cannot be made keeps none, and says why when used."""
        names = [m.name for m in self.registry.models if not self.profile(m.name).controls_known]
        if not names:
            return

        async def derive_all() -> None:
            for name in names:
                try:
                    await self.controls(name)
                except VlmDemoError as exc:
                    log.warning("%s: no controls derived: %s", name, exc)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (the page may be built inside an event loop)
            pool.submit(asyncio.run, derive_all()).result()

    async def inspect(self, request: ChatRequest, start_engine: bool = True) -> Inspection:
        """Render ``request`` without generating, with the model's engine (started if needed), or with
        ``start_engine=False`` with vLLM's renderer alone unless the engine already runs."""
        found = self.validate(request)
        engine = await (self.engines.get(found.spec) if start_engine else self.engines.renderer(found.spec))
        return self._inspect(engine, await self._render(found, engine, request), request)

    @staticmethod
    def _inspect(engine: Renderer, rendered: RenderedPrompt, request: ChatRequest) -> Inspection:
        ids = rendered.prompt_token_ids
        texts = engine.token_texts(ids)
        origins = [(item.source, item.number, item.dpi) if isinstance(item, Page) else None
                   for item in request.items("image")]
        return inspect(rendered, engine.token_runs(ids), texts, engine.joined_texts(ids, texts), engine.special_tokens,
                       origins, engine.adapter.rules)

    async def _prepare(self, found: profile.Profile, engine: Renderer,
                       request: ChatRequest) -> tuple[RenderedPrompt, Sampling, Inspection | None]:
        """The request rendered, the sampling it goes out with (``max_tokens`` cut to the room left, Detect
        mode's grammar) and, where that needed it, the render's inspection."""
        rendered = await self._render(found, engine, request)
        if len(rendered.prompt_token_ids) >= engine.max_model_len:  # (an inspection shows it, and what does not fit)
            raise InputError(
                f"the prompt is {len(rendered.prompt_token_ids):,} tokens; {found.spec.name} holds "
                f"{engine.max_model_len:,} (remove images, lower the image settings or clear the chat)")
        sampling = request.sampling or found.spec.sampling
        room = engine.max_model_len - len(rendered.prompt_token_ids)
        if sampling.max_tokens > room:
            sampling = replace(sampling, max_tokens=room)
        inspection = None
        if request.detect:  # the grammar's bounds come from the render
            inspection = self._inspect(engine, rendered, request)
            sampling = detect_sampling(sampling, found, request.detect, inspection)
        return rendered, sampling, inspection

    async def _render(self, found: profile.Profile, engine: Renderer, request: ChatRequest) -> RenderedPrompt:
        # What people typed; the model's own earlier answers may hold token text it generated (a tokenizer's
        # non-special added tokens, e.g. Qwen2.5's <|repo_name|>, survive decoding), and go back as they are.
        # The family's grounding tags are how a person asks where something is (InternVL's "<ref>cat</ref>").
        texts = [request.system, *(t.text for t in request.turns if t.role == "user")]
        grounding_tags = engine.adapter.grounding.tags if engine.adapter.grounding else ()
        for token in (*engine.special_tokens, *engine.placeholders.values()):
            if token not in grounding_tags and any(token in text for text in texts):
                raise InputError(
                    f"the text contains {token!r}, a special token or image placeholder of {found.spec.name}; "
                    "images go in as "
                    "attachments and the chat template adds its own markers, so remove it from the text")
        if not found.controls_known:  # an entry and family without controls: its processor's, derived once
            found = self.profiles.keep(await self.engines.derived_profile(found))
            check_mm_kwargs(found, request.mm_kwargs)
        return await engine.render(to_openai_messages(request), found.mm_processor_kwargs(request.mm_kwargs),
                                   sent_media_io(request, found, self.settings))

    async def chat(self, request: ChatRequest, preview: bool = False, sent: float | None = None
                   ) -> AsyncIterator[Event]:
        """Render, then stream the answer; closing the iterator aborts the engine request.

        ``preview`` (the page): where the model's engine is not running yet, vLLM's renderer alone renders the
        request first (a ``Rendered`` the panels show at once), ``Waiting`` events say where the engine's start
        stands, and the engine then generates from that very render (the same renderer's output an engine's own
        would give). Without it (the CLI) the engine starts first and renders itself (no renderer to build).
        ``sent`` (``time.perf_counter()``): when the person sent the question; a wait for the engine counts from
        there (default: from the render)."""
        if request.each_page:  # one request per page, all at once
            async with contextlib.aclosing(each_page(request, lambda one: self.chat(one, preview, sent))) as merged:
                try:
                    async for event in merged:
                        yield event
                except VlmDemoError as exc:
                    yield Failed(str(exc))
            return
        try:
            found = self.validate(request)
            engine = self.engines.running(found.spec)
            if engine is None and preview and not found.spec.remote:
                events = self._preview_then_answer(found, request, sent)
            else:
                engine = engine or await self.engines.get(found.spec)
                t0 = time.perf_counter()
                rendered, sampling, inspection = await self._prepare(found, engine, request)
                events = self._answer(engine, rendered, sampling, t0, announce=inspection or request,
                                      model=found.spec.name)
            async with contextlib.aclosing(events):  # closed early (Stop, a closed tab): the request is aborted
                async for event in events:
                    yield event
        except VlmDemoError as exc:
            yield Failed(str(exc))

    async def _preview_then_answer(self, found: profile.Profile, request: ChatRequest,
                                   sent: float | None = None) -> AsyncIterator[Event]:
        """The request rendered by vLLM's renderer alone (``Rendered`` at once), ``Waiting`` while the model's
        engine starts (closing the stream leaves the start going: the engine is wanted), then the answer that
        engine generates from that render; the wait counts from ``sent`` (else from the render)."""
        spec = found.spec
        renderer = await self.engines.renderer(spec)
        rendered, sampling, inspection = await self._prepare(found, renderer, request)
        inspection = inspection or self._inspect(renderer, rendered, request)
        yield Rendered(rendered, inspection, sampling)
        t_wait = sent if sent is not None else time.perf_counter()
        start = asyncio.ensure_future(self.engines.get(spec))
        while not start.done():
            progress = self.engines.progress(spec.name)
            yield Waiting(spec.name, progress.text() if progress else "starting", time.perf_counter() - t_wait)
            await asyncio.wait({start}, timeout=WAITING_EVERY_S)
        engine = start.result()
        waited = time.perf_counter() - t_wait
        async with contextlib.aclosing(self._answer(engine, rendered, sampling, time.perf_counter(), waited=waited,
                                                    work=inspection, model=spec.name)) as events:
            async for event in events:
                yield event

    async def _answer(self, engine: Renderer, rendered: RenderedPrompt, sampling: Sampling, t0: float,
                      waited: float = 0.0, announce: Inspection | ChatRequest | None = None,
                      work: Inspection | None = None, model: str = "") -> AsyncIterator[Event]:
        """The answer to ``rendered`` as ``Delta`` events, then ``Done``; ``announce``: a ``Rendered`` first (with
        this inspection, or one made here of this request's render). The request goes to the engine first; the
        inspection and the consumer's handling of ``Rendered`` (the UI draws its panels) then overlap the prefill
        instead of delaying it. A prefill that lasts says so each ``WAITING_EVERY_S`` (``Prefilling``: what the
        engine encodes, from ``work`` or the announced inspection). Closing the stream early aborts the engine
        request (the stream's own cleanup)."""
        stream = engine.stream(rendered, sampling)
        first = asyncio.ensure_future(anext(stream, None))
        await asyncio.sleep(0)  # the request task takes its first step (input processing) before the inspection
        answer, reasoning, n, n_reasoning, t_first, finish, cached = "", "", 0, 0, 0.0, None, 0
        try:
            if announce is not None:
                work = announce if isinstance(announce, Inspection) else self._inspect(engine, rendered, announce)
                yield Rendered(rendered, work, sampling)
            while not first.done():  # a long prefill (a reader's many views on CPU): what the engine works on
                await asyncio.wait({first}, timeout=WAITING_EVERY_S)
                if not first.done():
                    yield Prefilling(model, prefill_work(work) if work is not None else
                                     f"a {len(rendered.prompt_token_ids):,}-token prompt", time.perf_counter() - t0,
                                     waited)
            delta = first.result()
            while delta is not None:
                if n == 0 and delta.num_tokens:
                    t_first = time.perf_counter()
                n += delta.num_tokens
                answer += delta.text
                reasoning += delta.reasoning
                n_reasoning += delta.reasoning_tokens
                finish = delta.finish_reason or finish
                cached = cached if delta.num_cached_tokens is None else delta.num_cached_tokens  # prefix cache
                if delta.text or delta.reasoning:
                    now = time.perf_counter()
                    yield Delta(delta.text, answer, reasoning, Figures(
                        n, (t_first - t0) if t_first else 0.0, (n - 1) / (now - t_first) if n > 1 and now > t_first
                        else 0.0, wait_s=waited))
                delta = await anext(stream, None)
        finally:
            if not first.done():
                first.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await first
            await stream.aclose()
        t_end = time.perf_counter()
        rate = (n - 1) / (t_end - t_first) if n > 1 and t_end > t_first else 0.0
        yield Done(answer, Figures(n, (t_first or t_end) - t0, rate, finish, len(rendered.prompt_token_ids), cached,
                                   n_reasoning, waited), reasoning)
