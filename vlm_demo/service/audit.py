"""Audit a serving deployment: does an OpenAI-compatible server render a request as vLLM's reference renderer
renders it from the model's own files? One request (``audit``), or a sweep of the model's controls and of one
and two pictures (``sweep``). The server's side is ``engine.server_prompt``'s, the verdict ``inspector.verdict``'s.

The request carries the processor settings a person chose and no others, so the checkpoint's own settings are
what the server is held to (a server started with other ``--mm-processor-kwargs`` then shows)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from .. import profile
from ..engine import EngineManager, RemoteEngine, Renderer
from ..engine.server_prompt import server_prompt
from ..errors import InputError
from ..inspector.verdict import DIFFERS, Verdict, verdict
from ..registry import ModelSpec, Registry
from ..settings import Settings
from .checks import check_request, sent_media_io
from .requests import ChatRequest, Turn, to_openai_messages

SEARCH_STEPS = 14
"""Most reference renders spent finding the setting that gives a server's token counts (a bisection)."""


@dataclasses.dataclass
class Auditor:
    """Audits of one endpoint model: its server, and the reference renderer of the checkpoint it serves (a
    directory here or a Hub id: ``reference``, else the server's ``/v1/models`` root), built once."""

    spec: ModelSpec
    engines: EngineManager
    settings: Settings
    reference: str | None = None
    prefer_render: bool = True
    """False: read the server's ids from a chat completion even where it offers its render endpoint."""
    trust_remote_code: bool = False
    """Run the checkpoint's own code in the reference renderer (as the server does)."""
    profiles: profile.Profiles | None = None
    """Where the model's profile is kept (the service's: with the controls derived from the checkpoint), else it is
    resolved from the entry."""
    _renderer: Renderer | None = None

    @property
    def found(self) -> profile.Profile:
        """The model's profile."""
        return self.profiles.get(self.spec) if self.profiles is not None else profile.resolve(self.spec)

    @classmethod
    def of(cls, registry: Registry, name: str, engines: EngineManager, settings: Settings,
           reference: str | None = None, prefer_render: bool = True, trust_remote_code: bool | None = None,
           profiles: profile.Profiles | None = None) -> Auditor:
        """The auditor of endpoint model ``name``; ``trust_remote_code`` unless given: as the registry's own entry
        of the model it serves (by name or repo) has it."""
        spec = registry.get(name)
        if not spec.remote:
            raise InputError(f"{name} is not an endpoint model: audit a server (--endpoint URL --model NAME)")
        if trust_remote_code is None:
            local = next((m for m in registry.models if not m.remote
                          and spec.served_model_name in (m.name, m.repo)), None)
            trust_remote_code = bool(local and local.engine_args.trust_remote_code)
        return cls(spec, engines, settings, reference, prefer_render, trust_remote_code, profiles)

    async def audit(self, request: ChatRequest, with_defaults: bool = False) -> Verdict:
        """The server's prompt for ``request`` against the reference's, with the likely causes where they differ
        (for a different token count, the control value that gives the server's counts, where one does).
        ``with_defaults``: the request goes with the entry's default settings too, as the page sends it."""
        found = self.found
        check_request(request, found, self.settings)
        kwargs = (found.mm_processor_kwargs if with_defaults else found.sent)(request.mm_kwargs)
        settings = {**(found.default_mm_kwargs() if with_defaults else {}), **request.mm_kwargs}  # (as named)
        messages = to_openai_messages(request)
        media_io = sent_media_io(request, found, self.settings)
        remote = RemoteEngine(self.spec, self.settings)
        try:
            server = await server_prompt(remote, messages, kwargs, media_io, self.prefer_render)
        finally:
            await remote.aclose()
        renderer = await self._reference(server.root, server.max_model_len)
        reference = await renderer.render(messages, kwargs, media_io)
        result = verdict(reference, server, renderer.token_runs, settings=settings)
        if result.status == DIFFERS and any(i.server not in (None, 0, i.reference) for i in result.items):
            hint = await self._settings_hint(renderer, found, request, messages, media_io, result)
            if hint:
                result = verdict(reference, server, renderer.token_runs, hint, settings)
        return result

    async def sweep(self, picture: Any) -> list[tuple[str, Verdict]]:
        """One and two pictures with the checkpoint's settings, then each of the model's picture controls at its
        smallest, default and largest value (one picture): (what was tried, its verdict)."""
        found = self.found
        one = (Turn("user", "What is in this picture?", {"image": (picture,)}),)
        two = (Turn("user", "Compare the two pictures.", {"image": (picture, picture.rotate(90, expand=True))}),)
        cases: list[tuple[str, ChatRequest]] = [
            ("one picture", ChatRequest(model=self.spec.name, turns=one)),
            ("two pictures", ChatRequest(model=self.spec.name, turns=two))]
        for control in found.controls:
            if control.kwarg.startswith("videos_kwargs."):  # (a sweep sends pictures)
                continue
            values = (False, True) if control.kind == "bool" else dict.fromkeys(
                v for v in (control.min, control.default, control.max) if v is not None)
            cases += [(f"{control.kwarg}={v}",
                       ChatRequest(model=self.spec.name, turns=one, mm_kwargs={control.kwarg: v})) for v in values]
        return [(label, await self.audit(request)) for label, request in cases]

    async def _reference(self, root: str | None, max_model_len: int | None) -> Renderer:
        if self._renderer is None:
            self._renderer = await asyncio.to_thread(self.engines.reference_renderer, self.spec,
                                                     self.reference or root, max_model_len, self.trust_remote_code)
        return self._renderer

    async def _settings_hint(self, renderer: Renderer, found: profile.Profile, request: ChatRequest,
                             messages: Sequence[dict[str, Any]], media_io: dict[str, Any], result: Verdict) -> str:
        """The value of one of the model's image controls with which the reference gives the server's token
        count for every picture (bisection: more pixels, more tokens), said as the server's likely setting."""
        wanted = [(i.index, i.server) for i in result.items if i.modality == "image"]
        if not wanted:
            return ""

        async def counts(kwarg: str, value: int) -> list[int]:
            kwargs = found.sent({**request.mm_kwargs, kwarg: value})
            rendered = await renderer.render(messages, kwargs, media_io)
            token = rendered.token_ids.get("image")
            ids = rendered.prompt_token_ids
            return [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token)
                    for r in rendered.ranges.get("image", ())]

        target = [n for _, n in wanted]
        for control in found.controls:
            if control.kind != "int" or control.kwarg.startswith("videos_kwargs") or control.min is None:
                continue
            lo, hi = 0, (int(control.max) - int(control.min)) // control.step
            for _ in range(SEARCH_STEPS):
                if lo > hi:
                    break
                mid = (lo + hi) // 2
                value = int(control.min) + mid * control.step
                got = await counts(control.kwarg, value)
                if got == target:
                    hint = (f"; the reference gives the server's counts with {control.kwarg}={value}: the server "
                            f"likely runs with {control.kwarg} near {value}")
                    if control.kwarg in request.mm_kwargs:  # sent, and overruled there
                        hint += (f", whatever the request's {control.kwarg}={request.mm_kwargs[control.kwarg]} says "
                                 "(a server-wide setting under the processor's other name for it wins)")
                    return hint
                if got[0] < target[0]:
                    lo = mid + 1
                else:
                    hi = mid - 1
        return ""
