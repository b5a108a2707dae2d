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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal


from . import families, profile
from .engine import EngineManager, RenderedPrompt, Renderer
from .inspector import Inspection, inspect
from .intake import ImageEmbeds, Video
from .errors import InputError, VlmDemoError
from .families.grounding import Grounding
from .registry import ModelSpec, Registry, Sampling
from .settings import VIDEO_FPS, VIDEO_NUM_FRAMES, WAITING_EVERY_S, Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    """One message of a conversation."""

    role: Literal["user", "assistant"]
    """Who said it."""
    text: str
    """What was said."""
    media: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Attachments per modality (user turns only): ``{"image": (decoded RGB images or precomputed
    image embeddings, ...), "video": (checked videos, ...)}``."""

    def count(self, modality: str) -> int:
        """How many items of ``modality`` the message holds."""
        return len(self.media.get(modality, ()))


@dataclass(frozen=True)
class ChatRequest:
    """Everything one answer depends on."""

    model: str
    """Registry name of the model."""
    turns: tuple[Turn, ...]
    """The conversation so far, ending with the user's new message."""
    system: str = ""
    """System prompt ("" for the template's default)."""
    mm_kwargs: dict[str, Any] = field(default_factory=dict)
    """Per-request processor kwargs (control values)."""
    sampling: Sampling | None = None
    """Sampling settings; None uses the model's defaults."""
    media_io: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-request media loading options per modality, vLLM's ``media_io_kwargs``: ``{"video": {"num_frames":
    8, "fps": 2}}`` (how many frames vLLM's loader samples from each video); empty: vLLM's defaults."""
    detect: str = ""
    """Detect mode's "what to find" ("": off; ``detect_request`` sets it): the answer is held to the family's box
    grammar, every coordinate inside the picture as the engine's processor made it (known once rendered)."""


@dataclass(frozen=True)
class Rendered:
    """The engine's rendered input, before generation starts."""

    rendered: RenderedPrompt
    """Prompt text, expanded token ids and image ranges, exactly as the engine gets them."""
    inspection: Inspection
    """The inspector's view of ``rendered``."""
    sampling: Sampling | None = None
    """The sampling the engine gets (``max_tokens`` cut to the room left, Detect mode's grammar)."""


@dataclass(frozen=True)
class Waiting:
    """The model's engine is starting; the request waits for it (its ``Rendered`` came from vLLM's renderer
    alone, and the engine will generate from that render)."""

    model: str
    """Registry name of the model."""
    phase: str
    """Where the start stands, in words, with its time so far."""
    waited_s: float
    """Seconds this request has waited so far."""


@dataclass(frozen=True)
class Delta:
    """New answer (or reasoning) text."""

    text: str
    """Text added since the previous event."""
    answer: str
    """The answer so far."""
    reasoning: str = ""
    """The reasoning so far (a model entry with a ``reasoning_parser``); ``answer`` holds only what follows it."""
    num_tokens: int = 0
    """Tokens generated so far (reasoning included)."""
    ttft_s: float = 0.0
    """Seconds to this answer's first token (as ``Done.ttft_s``)."""
    tokens_per_s: float = 0.0
    """Generated tokens per second after the first one, so far."""
    wait_s: float = 0.0
    """Seconds the request waited for the model's engine to start (as ``Done.wait_s``)."""


@dataclass(frozen=True)
class Done:
    """The answer is complete."""

    answer: str
    """The whole answer."""
    num_tokens: int
    """Tokens generated."""
    ttft_s: float
    """Seconds from the request reaching the engine (rendering included) to the first token; for a request that
    waited for its engine to start, from the engine being ready (the render came before, during the wait)."""
    tokens_per_s: float
    """Generated tokens per second after the first one (0 for a single token)."""
    finish_reason: str | None
    """Why generation ended ("stop", "length")."""
    prompt_tokens: int = 0
    """Prompt tokens the engine ran on."""
    cached_tokens: int = 0
    """Prompt tokens served from vLLM's prefix cache (whole KV-cache blocks; 0 where the engine does not
    say)."""
    reasoning: str = ""
    """The whole reasoning, split off by the entry's ``reasoning_parser`` ("" without one); the next turn's
    prompt keeps only ``answer``, as the thinking models' chat templates do with earlier turns."""
    reasoning_tokens: int = 0
    """How many of ``num_tokens`` are reasoning: the generated tokens up to and including the end marker."""
    wait_s: float = 0.0
    """Seconds the request waited for the model's engine to start (0 when it was running)."""


@dataclass(frozen=True)
class Failed:
    """The request failed; nothing else changed."""

    message: str
    """What to tell the user."""


Event = Rendered | Waiting | Delta | Done | Failed


def to_openai_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The conversation as OpenAI-style chat messages, images as decoded ``image_pil`` parts."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": [{"type": "text", "text": request.system}]})
    for turn in request.turns:
        parts = [_part(modality, item) for modality, items in turn.media.items() for item in items]
        parts.append({"type": "text", "text": turn.text})
        messages.append({"role": turn.role, "content": parts})
    return messages


def _part(modality: str, item: Any) -> dict[str, Any]:
    """One attachment as a chat content part (a video as the ``video_url`` part ``vllm serve`` takes: vLLM's
    own loader decodes and samples it)."""
    if modality == "image":
        if isinstance(item, ImageEmbeds):
            return {"type": "image_embeds", "image_embeds": dict(item.tensors)}
        return {"type": "image_pil", "image_pil": item}
    if modality == "video" and isinstance(item, Video):
        return {"type": "video_url", "video_url": {"url": item.data_url()}}
    raise InputError(f"{modality} attachments are not supported")


MEDIA_IO_KEYS = {"video": ("num_frames", "fps")}
"""The per-request media loading options the app sends, per modality (vLLM's ``media_io_kwargs``)."""


def check_media_io(media_io: Mapping[str, Mapping[str, Any]], settings: Settings) -> None:
    """Raise ``InputError`` unless every option is known and within the settings' limits."""
    for modality, options in media_io.items():
        known = MEDIA_IO_KEYS.get(modality, ())
        for key, value in options.items():
            if key not in known:
                raise InputError(f"unknown {modality} option {key!r}; known: {', '.join(known) or 'none'}")
            if key == "num_frames":
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= settings.max_video_frames:
                    raise InputError(f"num_frames must be a whole number in 1..{settings.max_video_frames} (got {value!r})")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= settings.max_video_fps:
                raise InputError(f"fps must be a number above 0 and at most {settings.max_video_fps:g} (got {value!r})")


def video_sampling(spec: ModelSpec) -> str:
    """How the entry's videos are sampled: "num_frames" or "fps" (its family adapter's ``video_sampling``)."""
    return profile.adapter(spec).video_sampling


def sent_media_io(request: ChatRequest, spec: ModelSpec, settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``media_io_kwargs`` a request goes out with, for the modalities the conversation holds: its own
    options, and for videos always the one the family's loader samples by, so the panels, Export and a
    ``vllm serve`` replay agree on the frames. Families sampled by count (``num_frames``; ``fps`` caps it) get
    ``VIDEO_NUM_FRAMES`` where the request sets nothing, and the settings' limit where it sets ``fps`` alone
    (vLLM drops its default count when only ``fps`` comes, which would leave a long clip unbounded); families
    sampled by rate (Qwen-VL, whose loaders ignore ``num_frames``) get ``fps`` (``VIDEO_FPS`` by default) and
    no ``num_frames``."""
    held = {m for t in request.turns for m, items in t.media.items() if items}
    out = {m: dict(v) for m, v in request.media_io.items() if m in held and v}
    if "video" in held:
        video = out.setdefault("video", {})
        if video_sampling(spec) == "fps":
            video.pop("num_frames", None)
            video.setdefault("fps", VIDEO_FPS)
        else:
            video.setdefault("num_frames", settings.max_video_frames if "fps" in video else VIDEO_NUM_FRAMES)
    return out


def check_sampled_frames(request: ChatRequest, spec: ModelSpec, settings: Settings) -> None:
    """Refuse a request whose videos would be sampled into more than ``max_video_frames`` frames: for a family
    sampled by rate, a clip's length times the rate (the count is bounded by ``num_frames`` otherwise)."""
    if video_sampling(spec) != "fps":
        return
    fps = sent_media_io(request, spec, settings).get("video", {}).get("fps", VIDEO_FPS)
    for turn in request.turns:
        for video in turn.media.get("video", ()):
            frames = min(int(video.duration_s * fps), video.num_frames)
            if frames > settings.max_video_frames:
                raise InputError(f"{video.name}: at {fps:g} fps its {video.duration_s:.1f} s give {frames} frames; "
                                 f"the limit is {settings.max_video_frames} (lower fps)")


def check_mm_kwargs(found: profile.Profile, mm_kwargs: Mapping[str, Any]) -> None:
    """Each per-request processor kwarg must be one of the model's controls, of its type and in its range
    (``InputError``, one line). Not yet where the controls are still to be derived from the processor; not for
    a remote model the app cannot identify: what the person typed goes to the server, which says what it takes."""
    if not found.controls_known or (found.spec.remote and not found.controls):
        return
    for key, value in mm_kwargs.items():
        control = found.control(key)
        if control is None:
            raise InputError(f"{found.spec.name} has no setting {key!r}; its settings: "
                             f"{', '.join(c.kwarg for c in found.controls) or 'none'}")
        try:
            control.check(value)
        except ValueError as exc:
            raise InputError(str(exc)) from None


def grounding_of(spec: ModelSpec) -> Grounding:
    """The entry's grounding format; ``InputError`` naming the families that have one where it has none."""
    found = profile.adapter(spec).grounding
    if found is None:
        having = ", ".join(a.title for a in families.ADAPTERS.values() if a.grounding)
        raise InputError(f"{spec.name} has no box format the app reads (families with one: {having})")
    return found


def detect_request(request: ChatRequest, spec: ModelSpec, what: str) -> ChatRequest:
    """Detect mode: the last user turn asks the family's own question for ``what`` after the person's own words
    (its images kept), and the answer is held to the family's box grammar (vLLM's structured outputs), so it
    always parses."""
    grounding = grounding_of(spec)
    what = what.strip()
    if not what:
        raise InputError("say what to detect")
    *before, last = request.turns
    if not last.count("image") and not any(t.count("image") for t in before):
        raise InputError("Detect needs an image")
    question = grounding.detect_prompt(what)
    text = f"{last.text.strip()}\n{question}" if last.text.strip() else question
    return replace(request, turns=(*before, replace(last, text=text)), detect=what)


def detect_sampling(sampling: Sampling, spec: ModelSpec, what: str, inspection: Inspection) -> Sampling:
    """``sampling`` held to the family's box grammar for ``what``, every coordinate inside the conversation's
    last image as the format counts it (for Qwen2.5-VL the processed size the engine's processor made)."""
    grounding = grounding_of(spec)
    images = inspection.items.get("image", ())
    bounds = grounding.bounds(images[-1].processed_size if images else None)
    if bounds is None:
        raise InputError(f"{spec.name}'s processor gave no processed size for the picture; Detect cannot bound "
                         "the boxes")
    return replace(sampling, regex=grounding.detect_regex(what, bounds))


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class ChatService:
    """Validates requests, renders them with the engine and streams answers as events."""

    def __init__(self, registry: Registry, engines: EngineManager, settings: Settings):
        self.registry = registry
        self.engines = engines
        self.settings = settings

    def validate(self, request: ChatRequest) -> ModelSpec:
        """Check the request against the limits; raise ``InputError`` with the reason."""
        spec = self.registry.get(request.model)
        if not request.turns or request.turns[-1].role != "user":
            raise InputError("the conversation must end with a user message")
        if not request.turns[-1].text.strip() and not request.turns[-1].media:
            raise InputError("type a question or add an image")
        if request.detect:
            grounding_of(spec)  # the family has a box format
        if len(request.turns) > self.settings.max_turns:
            raise InputError(f"the conversation has {len(request.turns)} messages; the limit is "
                             f"{self.settings.max_turns} (clear the chat to go on)")
        for turn in request.turns:
            if len(turn.text) > self.settings.max_text_chars:
                raise InputError(f"a message is longer than {self.settings.max_text_chars:,} characters")
        if len(request.system) > self.settings.max_text_chars:
            raise InputError(f"the system prompt is longer than {self.settings.max_text_chars:,} characters")
        for modality in {m for t in request.turns for m, items in t.media.items() if items}:
            per_turn, per_conversation = self.settings.media_limits(modality)
            allowed = spec.engine_args.limit_mm_per_prompt.get(modality, 0)
            if not allowed:
                takes = ", ".join(m for m, n in spec.engine_args.limit_mm_per_prompt.items() if n) or "text only"
                raise InputError(f"{spec.name} does not take {modality} (it takes: {takes}); pick a model that does")
            n = request.turns[-1].count(modality)
            if n > min(per_turn, allowed):
                raise InputError(f"{_plural(n, modality)} in one message; {spec.name} takes at most "
                                 f"{min(per_turn, allowed)}")
            total = sum(t.count(modality) for t in request.turns)
            if total > min(per_conversation, allowed):
                raise InputError(f"the conversation holds {_plural(total, modality)}; {spec.name} takes at most "
                                 f"{min(per_conversation, allowed)} per prompt")
        check_media_io(request.media_io, self.settings)
        check_sampled_frames(request, spec, self.settings)
        check_mm_kwargs(profile.profile(spec), request.mm_kwargs)
        return spec

    async def controls(self, name: str) -> profile.Profile:
        """The model's profile with its controls known: for an entry that offers none, its processor's
        (derived with vLLM's renderer of the model; no engine starts)."""
        return await self.engines.derived_profile(self.registry.get(name))

    def derive_controls(self) -> None:
        """Derive the controls of every registry model whose entry offers none (the page shows each model's
        controls from its start); a model whose renderer cannot be made keeps none, and says why when used."""
        names = [m.name for m in self.registry.models if not profile.profile(m).controls_known]
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
        spec = self.validate(request)
        engine = await (self.engines.get(spec) if start_engine else self.engines.renderer(spec))
        return self._inspect(engine, await self._render(spec, engine, request))

    @staticmethod
    def _inspect(engine: Renderer, rendered: RenderedPrompt) -> Inspection:
        ids = rendered.prompt_token_ids
        texts = engine.token_texts(ids)
        return inspect(rendered, engine.token_runs(ids), texts, engine.joined_texts(ids, texts), engine.special_tokens)

    async def _prepare(self, spec: ModelSpec, engine: Renderer,
                       request: ChatRequest) -> tuple[RenderedPrompt, Sampling, Inspection | None]:
        """The request rendered, the sampling it goes out with (``max_tokens`` cut to the room left, Detect
        mode's grammar) and, where that needed it, the render's inspection."""
        rendered = await self._render(spec, engine, request)
        sampling = request.sampling or spec.sampling
        room = engine.max_model_len - len(rendered.prompt_token_ids)
        if sampling.max_tokens > room:
            sampling = replace(sampling, max_tokens=room)
        inspection = None
        if request.detect:  # the grammar's bounds come from the render
            inspection = self._inspect(engine, rendered)
            sampling = detect_sampling(sampling, spec, request.detect, inspection)
        return rendered, sampling, inspection

    async def _render(self, spec: ModelSpec, engine: Renderer, request: ChatRequest) -> RenderedPrompt:
        # What people typed; the model's own earlier answers may hold token text it generated (a tokenizer's
        # non-special added tokens, e.g. Qwen2.5's <|repo_name|>, survive decoding), and go back as they are.
        # The family's grounding tags are how a person asks where something is (InternVL's "<ref>cat</ref>").
        texts = [request.system, *(t.text for t in request.turns if t.role == "user")]
        grounding_tags = engine.adapter.grounding.tags if engine.adapter.grounding else ()
        for token in (*engine.special_tokens, *engine.placeholders.values()):
            if token not in grounding_tags and any(token in text for text in texts):
                raise InputError(
                    f"the text contains {token!r}, a special token or image placeholder of {spec.name}; "
                    "images go in as "
                    "attachments and the chat template adds its own markers, so remove it from the text")
        found = profile.profile(spec)
        if not found.controls_known:  # an entry and family without controls: its processor's, derived once
            found = await self.engines.derived_profile(spec)
            check_mm_kwargs(found, request.mm_kwargs)
        rendered = await engine.render(to_openai_messages(request), found.mm_processor_kwargs(request.mm_kwargs),
                                       sent_media_io(request, spec, self.settings))
        if len(rendered.prompt_token_ids) >= engine.max_model_len:
            raise InputError(
                f"the prompt is {len(rendered.prompt_token_ids):,} tokens; {spec.name} holds "
                f"{engine.max_model_len:,} (remove images, lower the image settings or clear the chat)")
        return rendered

    async def chat(self, request: ChatRequest, preview: bool = False) -> AsyncIterator[Event]:
        """Render, then stream the answer; closing the iterator aborts the engine request.

        ``preview`` (the page): where the model's engine is not running yet, vLLM's renderer alone renders the
        request first (a ``Rendered`` the panels show at once), ``Waiting`` events say where the engine's start
        stands, and the engine then generates from that very render (the same renderer's output an engine's own
        would give). Without it (the CLI) the engine starts first and renders itself (no renderer to build)."""
        try:
            spec = self.validate(request)
            engine = self.engines.running(spec)
            waited, previewed = 0.0, False
            if engine is None and preview and not spec.remote:
                renderer = await self.engines.renderer(spec)
                rendered, sampling, inspection = await self._prepare(spec, renderer, request)
                yield Rendered(rendered, inspection or self._inspect(renderer, rendered), sampling)
                previewed = True
                t_wait = time.perf_counter()
                start = asyncio.ensure_future(self.engines.get(spec))
                while not start.done():  # (closing the stream leaves the start going: the engine is wanted)
                    progress = self.engines.progress(spec.name)
                    yield Waiting(spec.name, progress.text() if progress else "starting",
                                  time.perf_counter() - t_wait)
                    await asyncio.wait({start}, timeout=WAITING_EVERY_S)
                engine = start.result()
                waited = time.perf_counter() - t_wait
                t0 = time.perf_counter()
            else:
                engine = engine or await self.engines.get(spec)
                t0 = time.perf_counter()
                rendered, sampling, inspection = await self._prepare(spec, engine, request)
            # The request goes to the engine first; the inspection and the consumer's handling of
            # ``Rendered`` (the UI draws its panels) then overlap the prefill instead of delaying it.
            stream = engine.stream(rendered, sampling)
            first = asyncio.ensure_future(anext(stream, None))
            await asyncio.sleep(0)  # the request task takes its first step (input processing) before the inspection
            try:
                if not previewed:
                    yield Rendered(rendered, inspection or self._inspect(engine, rendered), sampling)
                answer, n, t_first, finish = "", 0, 0.0, None
                cached = 0  # prompt tokens from the prefix cache, as the engine reports them
                reasoning, n_reasoning = "", 0
                delta = await first
                while delta is not None:
                    if n == 0 and delta.num_tokens:
                        t_first = time.perf_counter()
                    n += delta.num_tokens
                    answer += delta.text
                    reasoning += delta.reasoning
                    n_reasoning += delta.reasoning_tokens
                    finish = delta.finish_reason or finish
                    cached = cached if delta.num_cached_tokens is None else delta.num_cached_tokens
                    if delta.text or delta.reasoning:
                        now = time.perf_counter()
                        yield Delta(delta.text, answer, reasoning, num_tokens=n, ttft_s=(t_first - t0) if t_first else 0.0,
                                    tokens_per_s=(n - 1) / (now - t_first) if n > 1 and now > t_first else 0.0,
                                    wait_s=waited)
                    delta = await anext(stream, None)
            finally:  # closed early (Stop, a closed tab): the stream's own cleanup aborts the request
                if not first.done():
                    first.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await first
                await stream.aclose()
            t_end = time.perf_counter()
            rate = (n - 1) / (t_end - t_first) if n > 1 and t_end > t_first else 0.0
            yield Done(answer, n, (t_first or t_end) - t0, rate, finish,
                       prompt_tokens=len(rendered.prompt_token_ids), cached_tokens=cached,
                       reasoning=reasoning, reasoning_tokens=n_reasoning, wait_s=waited)
        except VlmDemoError as exc:
            yield Failed(str(exc))
