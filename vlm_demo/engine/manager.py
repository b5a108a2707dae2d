"""The engine manager: one engine per model, started on first use and shared by every request; the engines of
recently used models kept warm while they fit a memory budget (``Settings.engines_memory_gib``; on a GPU, their
``gpu_memory_utilization`` shares), the least recently used one stopping when a new one needs its room; a model that
cannot start here refused before anything stops (``availability``); while a model's engine starts, where the start
stands; renderers without an engine core for the panels meanwhile; endpoint entries' remote engines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import psutil

from ..errors import EngineBusyError, EngineStartError, VlmDemoError
from ..profile import Profile, resolve
from ..registry import AUTO, ModelSpec
from ..settings import ENGINES_MEMORY_SHARE, Settings
from . import forkserver
from .availability import Availability, availability, footprint_gib, gpu_share
from .local import Engine
from .processes import has_gpu
from .remote import RemoteEngine
from .progress import EngineState, StartProgress
from .renderer import Renderer
from .renderer_cache import RendererCache, reference_spec
from .startup import engine_kwargs, model_path, start_engine, start_renderer

log = logging.getLogger(__name__)

BACKGROUND_STOP_GRACE_S = 30.0
"""How long an engine stopped for another (``_stop_in_background``) may take to end on its own before vLLM kills it:
nobody waits for it, and beside another engine's start on two cores its processes took over vLLM's 5 s."""


class EngineManager:
    """Starts, shares and stops engines: those of recently used models stay up while they fit the budget
    (``budget``) and ``settings.max_engines``. Endpoint entries get a ``RemoteEngine`` (no process, outside the
    budget and the switch policy)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._remote: dict[str, RemoteEngine] = {}
        self._loading: dict[str, StartProgress] = {}
        """The engines starting now, with where each stands."""
        self._renderers = RendererCache(self.start_renderer)
        """Renderers without an engine, for models whose engine does not run."""
        self._lock = asyncio.Lock()
        self._starts: dict[str, asyncio.Future[Engine]] = {}
        """Each model's engine start in progress (or last ended), which callers share."""
        self.starts = 0
        """How many engines this manager has started (tests check singletons with it)."""
        self._failed: dict[str, str] = {}
        """Each model whose last start failed, with why (until it starts)."""
        self._stopping: set[threading.Thread] = set()
        """Engines being stopped in the background (``_stop_in_background``)."""
        self._used: str | None = None
        """The local model picked or asked last (``touch``, ``get``): a start that ends after the person moved on
        to another model is no use of its model."""

    def warm(self) -> None:
        """Get ready to start engines fast: the forkserver their processes come from imports torch and vLLM now, in
        its own process (``forkserver.warm``; a few seconds, beside whatever this process does meanwhile)."""
        forkserver.warm(self.settings)

    def state(self, name: str) -> EngineState | str:
        """Whether the model's engine is not loaded, loading or ready ("remote: URL" for an endpoint)."""
        if name in self._remote:
            return f"remote: {self._remote[name].url}"
        if name in self._loading:
            return "loading"
        return "ready" if name in self._engines else "not loaded"

    def states(self) -> list[tuple[str, str]]:
        """Every local engine that runs or starts, most recently used first, with its state ("ready", or where its
        start stands): what every tab's status line lists."""
        ready = [(name, "ready") for name in reversed(self._engines) if name not in self._loading]
        return [*((name, f"starting: {p.text()}") for name, p in self._loading.items()), *ready]

    def touch(self, name: str) -> None:
        """Note that a person just picked ``name``: its engine, running or starting, is the one used last."""
        self._used = name
        if name in self._engines:
            self._engines.move_to_end(name)

    def current(self) -> str | None:
        """The model whose engine was used last (a start in progress counts), for a new tab to open on; None
        when no engine runs or starts. A start the person walked away from (another model picked since) is not it."""
        if self._used in self._loading or self._used in self._engines:
            return self._used
        if self._loading:
            return next(reversed(self._loading))
        return next(reversed(self._engines), None)

    def failure(self, name: str) -> str | None:
        """Why the model's last start failed, until a start of it succeeds; None otherwise."""
        return self._failed.get(name)

    def availability(self, spec: ModelSpec) -> Availability:
        """Whether ``spec`` can start on this machine now, and why not (``availability``: no engine, no renderer)."""
        return availability(spec, self.settings)

    def progress(self, name: str) -> StartProgress | None:
        """Where the start of the model's engine stands, while it starts; None otherwise."""
        return self._loading.get(name)

    def _phase(self, name: str, phase: str, **fields: int) -> None:
        """Note the phase a start has reached (called from the start's worker thread too)."""
        found = self._loading.get(name)
        if found is not None:
            self._loading[name] = dataclasses.replace(found, phase=phase, **fields)

    def running_requests(self) -> int:
        """Requests all running engines hold right now (0 when idle)."""
        return sum(engine.running_requests() for engine in self._engines.values())

    def loaded(self) -> list[str]:
        """Names of the models whose engines are running, least recently used first."""
        return list(self._engines)

    async def get(self, spec: ModelSpec) -> Engine | RemoteEngine:
        """The running engine of ``spec``, started on first use (once, however many ask at once); for an
        endpoint entry, the remote engine once its server has answered."""
        if spec.remote:
            remote = self._remote.get(spec.name)
            if remote is None or remote.spec != spec:
                remote = RemoteEngine(spec, self.settings)
            await remote.connect()  # an unreachable server raises RemoteError, and the next call asks again
            self._remote[spec.name] = remote
            return remote
        self._used = spec.name
        engine = self._engines.get(spec.name)
        if engine is not None and not engine.dead:
            self._engines.move_to_end(spec.name)
            return engine
        # The start runs as its own task: a caller that goes away (Stop, a closed tab) stops waiting for it, not
        # the start itself, which would otherwise leave an engine's processes running that nothing knows of.
        task = self._starts.get(spec.name)
        if task is None or task.done():
            task = self._starts[spec.name] = asyncio.ensure_future(self._get_locked(spec))
            task.add_done_callback(functools.partial(self._ended, spec.name))  # (each caller sees its error)
        if task.get_loop() is not asyncio.get_running_loop():  # begun by another page server of this process (the
            while not task.done():                             # tests run two over one manager): its loop runs it
                await asyncio.sleep(0.05)
            return task.result()
        return await asyncio.shield(task)

    def _ended(self, name: str, task: asyncio.Future[Engine]) -> None:
        """A start ended: where it failed in words the person can act on, note why (the status line says it)."""
        if not task.cancelled() and isinstance(task.exception(), VlmDemoError):
            self._failed[name] = str(task.exception())

    def expect_start(self, spec: ModelSpec) -> None:
        """Note that ``spec``'s engine starts as soon as the page server runs (``start_soon``): where its start
        stands reads "starting" from the page's first view."""
        self._loading.setdefault(spec.name, StartProgress("starting as the app comes up", time.monotonic()))

    def start_soon(self, spec: ModelSpec) -> None:
        """Start ``spec``'s engine in the background, as a first ``get`` would (callers of ``get`` meanwhile share
        this start); a failed start is logged in one line, and the next ``get`` tries again."""
        def logged(task: asyncio.Task[Any]) -> None:
            if not task.cancelled() and isinstance(task.exception(), VlmDemoError):
                log.warning("%s: the engine did not start: %s", spec.name, task.exception())
            elif not task.cancelled() and task.exception() is not None:
                log.error("%s: the engine did not start: %r", spec.name, task.exception())

        asyncio.ensure_future(self.get(spec)).add_done_callback(logged)

    def running(self, spec: ModelSpec) -> Engine | None:
        """The model's engine if it is started and alive (no start, no wait); None otherwise."""
        engine = self._engines.get(spec.name)
        return engine if engine is not None and not engine.dead else None

    async def _get_locked(self, spec: ModelSpec) -> Engine:
        """Start ``spec``'s engine (one start at a time): refused before anything stops where it cannot start here
        (``availability``); beside the running engines where it fits the budget, else after the least recently used
        ones stop (``_make_room``), which start again where the new one then fails (a switch never leaves the page
        without an engine). Where the start stands is ``progress(spec.name)`` meanwhile."""
        self._loading[spec.name] = StartProgress("waiting for another engine's start to end", time.monotonic())
        try:
            async with self._lock:
                engine = self._engines.get(spec.name)
                if engine is not None and engine.dead:
                    engine.retire()
                    await asyncio.to_thread(engine.shutdown)
                    del self._engines[spec.name]
                    engine = None
                if engine is None:
                    self._phase(spec.name, "checking that it can start here")
                    found = await asyncio.to_thread(availability, spec, self.settings)
                    if not found.runnable:
                        raise EngineStartError(f"{spec.label} cannot start here: {found.reason}")
                    self._phase(spec.name, "starting")
                    stopped = await self._make_room(spec)
                    try:
                        engine = await asyncio.to_thread(start_engine, spec, self.settings,
                                                          functools.partial(self._phase, spec.name))
                        try:
                            applied = await engine.start_workers()  # (Gemma 4's audio tower on CPU: workarounds)
                        except BaseException:
                            engine.shutdown()
                            raise
                        if applied:
                            log.info("%s: vLLM worker workarounds: %s", spec.name, ", ".join(applied))
                    except BaseException:
                        for old in stopped[-1:]:  # the engine the person had: up again (seconds)
                            log.info("%s did not start: starting %s again", spec.name, old.name)
                            asyncio.get_running_loop().call_soon(self.start_soon, old)
                        raise
                    self._failed.pop(spec.name, None)
                    self._engines[spec.name] = engine
                    self.starts += 1
                self._engines.move_to_end(spec.name)
                if self._used != spec.name and self._used in self._engines:  # picked while this one started: the
                    self._engines.move_to_end(self._used)                     # one used last, the first to stay
                return engine
        finally:
            self._loading.pop(spec.name, None)

    def budget(self) -> float:
        """What the engines may take together: GiB of this machine's memory on CPU (``engines_memory_gib``, else
        ``ENGINES_MEMORY_SHARE`` of it), or on a GPU its whole memory as 1.0 (engines count their shares)."""
        if has_gpu():
            return 1.0
        return self.settings.engines_memory_gib or ENGINES_MEMORY_SHARE * psutil.virtual_memory().total / 2**30

    def size(self, spec: ModelSpec) -> float:
        """What ``spec``'s engine takes of the budget: on a GPU its ``gpu_memory_utilization`` share; on CPU, once
        it runs, its processes' memory as measured at its start (proportional set sizes), else the estimate."""
        if has_gpu():
            return gpu_share(spec)
        engine = self._engines.get(spec.name)
        return engine.footprint_gib if engine is not None and engine.footprint_gib else footprint_gib(
            spec, self.settings)

    def _fits(self, spec: ModelSpec) -> bool:
        """Whether ``spec``'s engine fits beside the running ones (the budget and ``max_engines``)."""
        used = sum(self.size(e.spec) for e in self._engines.values())
        return len(self._engines) < self.settings.max_engines and used + self.size(spec) <= self.budget()

    async def _make_room(self, spec: ModelSpec) -> list[ModelSpec]:
        """Stop the least recently used engines until ``spec``'s fits (none while it fits: they stay warm, and the
        one a person switches from answers until the new one is up); of those, an idle one first, else the least
        recently used one once its requests end (``_wait_idle``: a switch never cuts an answer). The specs stopped,
        in order."""
        stopped: list[ModelSpec] = []
        while self._engines and not self._fits(spec):
            idle = [name for name, e in self._engines.items() if not e.running_requests()]
            old_name = idle[0] if idle else next(iter(self._engines))
            old = self._engines[old_name]
            if not idle:
                self._phase(spec.name, f"waiting for {old_name}'s requests to end")
                await self._wait_idle(old, spec.name)
            self._phase(spec.name, f"stopping {old_name}'s engine (it does not fit beside this one)")
            del self._engines[old_name]
            old.retire()
            self._stop_in_background(old)
            stopped.append(old.spec)
        stopping = [t for t in self._stopping if t.is_alive()]
        if stopping and psutil.virtual_memory().available < (self.size(spec) + 1.0) * 2**30:
            # the memory of the engines being stopped is needed (their ends overlap the start only where it is not)
            self._phase(spec.name, "waiting for the stopped engines to end (their memory is needed)")
            for thread in stopping:
                await asyncio.to_thread(thread.join, BACKGROUND_STOP_GRACE_S + 5)
        return stopped

    def _stop_in_background(self, engine: Engine) -> None:
        """Stop ``engine`` without waiting for its processes to end (about a second; longer beside a start): the new
        engine starts meanwhile; ``shutdown_all`` waits for every such stop."""
        thread = threading.Thread(target=engine.shutdown, args=(BACKGROUND_STOP_GRACE_S,), name=f"stop-{engine.spec.name}",
                                  daemon=True)
        self._stopping = {t for t in self._stopping if t.is_alive()} | {thread}
        thread.start()

    async def _wait_idle(self, engine: Engine, wanted: str) -> None:
        """Switch policy: wait up to ``switch_wait_s`` for the engine to finish others' requests."""
        deadline = time.monotonic() + self.settings.switch_wait_s
        while (busy := engine.running_requests()) and not engine.dead:
            if time.monotonic() >= deadline:
                raise EngineBusyError(
                    f"cannot switch to {wanted} now: {engine.spec.name} is answering {busy} request(s) of "
                    f"other users (waited {self.settings.switch_wait_s:.0f} s); try again in a moment")
            await asyncio.sleep(0.2)

    def engine(self, name: str) -> Engine | RemoteEngine | None:
        """The running engine of model ``name``, if any."""
        return self._engines.get(name) or self._remote.get(name)

    def special_tokens(self, name: str) -> tuple[str, ...]:
        """Special-token strings of the model's tokenizer, or () when its engine is not running."""
        engine = self.engine(name)
        return engine.special_tokens if engine else ()

    async def shutdown(self, name: str) -> None:
        """Stop one model's engine, if it runs."""
        remote = self._remote.pop(name, None)
        if remote is not None:
            await remote.aclose()
        async with self._lock:
            engine = self._engines.pop(name, None)
            if engine is not None:
                engine.retire()
                await asyncio.to_thread(engine.shutdown)

    def shutdown_all(self, grace_s: float | None = None) -> None:
        """Stop every engine at once (at exit: the warm ones end together, not one after another); ``grace_s`` as
        ``Engine.shutdown``'s."""
        engines = list(self._engines.values())
        self._engines.clear()
        stopping = [threading.Thread(target=engine.shutdown, args=(grace_s,), name=f"stop-{engine.spec.name}")
                    for engine in engines]
        for thread in stopping:
            thread.start()
        for thread in [*stopping, *self._stopping]:
            thread.join()
        while self._remote:
            self._remote.popitem()[1].shutdown()

    def close(self, grace_s: float | None = None) -> None:
        """Stop every engine and the forkserver their processes come from (the app's exit)."""
        self.shutdown_all(grace_s)
        forkserver.stop()

    async def derived_profile(self, found: Profile) -> Profile:
        """``found`` with its controls known: for an entry and family that offer none, those derived from the
        model's processor (``engine.derive_controls``). A remote model's come from the checkpoint its server says it
        serves (``/v1/models`` ``root``): a directory here, or a Hub id whose config, tokenizer and processor files
        are fetched (no weights); where that cannot be had, none, and what the person types goes to the server as
        it is. Nothing is kept here: the caller keeps what it gets."""
        if found.controls_known:
            return found
        spec = found.spec
        if not spec.remote:
            return await (await self.renderer(spec)).derived_profile(found)  # type: ignore[union-attr]
        remote = await self.get(spec)  # connected: its root names the checkpoint (an auto entry's family too)
        if spec.family == AUTO and remote.root:  # the family of the checkpoint it serves
            found = resolve(spec, remote.root)
        if found.controls_known:
            return found
        from .derive_controls import derive

        try:
            reference = await asyncio.to_thread(self.reference_renderer, spec, remote.root, remote.max_model_len)
            derived = await derive(reference)
        except VlmDemoError as exc:
            log.warning("%s: no controls derived (%s); per-request settings go to the server as typed", spec.name,
                        exc)
            return found.with_derived(())
        return found.with_derived(derived.controls, derived.values, derived.dicts, derived.scoped, derived.aliases)

    def checkpoint(self, spec: ModelSpec) -> str | None:
        """The checkpoint a remote model's server says it serves (its ``root``), once connected; else None (a local
        engine's is the entry's directory or Hub checkpoint)."""
        remote = self._remote.get(spec.name)
        return remote.root if remote is not None and remote.connected else None

    def reference_renderer(self, spec: ModelSpec, root: str | None, max_model_len: int | None = None,
                           trust_remote_code: bool = False) -> Renderer:
        """vLLM's renderer of the checkpoint ``root`` (what a server of ``spec`` serves), built here from its files
        (``renderer_cache.reference_spec``)."""
        return self.start_renderer(reference_spec(spec, root, self.settings, max_model_len, trust_remote_code))

    def start_renderer(self, spec: ModelSpec) -> Renderer:
        """vLLM's renderer for ``spec`` without an engine: rendering and expansion only (no process,
        no weights; for work that needs nothing else, such as ``inspect`` on the command line)."""
        return start_renderer(spec, self.settings)

    async def renderer(self, spec: ModelSpec) -> Renderer | RemoteEngine:
        """Something that renders ``spec``: its running engine, else a renderer without an engine (an
        endpoint entry: its remote engine). Never waits for an engine's start."""
        engine = self._engines.get(spec.name)
        if spec.remote or (engine is not None and not engine.dead):
            return await self.get(spec)
        return await self._renderers.get(spec)

    def engine_kwargs(self, spec: ModelSpec, model_dir: str | None = None) -> dict[str, Any]:
        """``AsyncEngineArgs`` keyword arguments for ``spec`` on this machine (``startup.engine_kwargs``)."""
        return engine_kwargs(spec, self.settings, model_dir)

    def model_path(self, spec: ModelSpec, report: Any = None, weights: bool = True) -> str:
        """What vLLM loads for ``spec`` (``startup.model_path``)."""
        return model_path(spec, self.settings, report, weights)
