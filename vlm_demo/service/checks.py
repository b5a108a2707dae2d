"""A request checked against the limits, the model's controls and its video sampling, before anything is rendered
(``InputError``: one line saying why); the media loading options a request goes out with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import profile
from ..errors import InputError
from ..intake import Page
from ..settings import VIDEO_FPS, VIDEO_NUM_FRAMES, Settings
from .detect import grounding_of
from .requests import ChatRequest


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


def video_sampling(found: profile.Profile) -> str:
    """How the model's videos are sampled (``found``: its profile): "num_frames" or "fps" (its family adapter's
    ``video_sampling``)."""
    return found.adapter.video_sampling


def sent_media_io(request: ChatRequest, found: profile.Profile, settings: Settings) -> dict[str, dict[str, Any]]:
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
        if video_sampling(found) == "fps":
            video.pop("num_frames", None)
            video.setdefault("fps", VIDEO_FPS)
        else:
            video.setdefault("num_frames", settings.max_video_frames if "fps" in video else VIDEO_NUM_FRAMES)
    return out


def check_sampled_frames(request: ChatRequest, found: profile.Profile, settings: Settings) -> None:
    """Refuse a request whose videos would be sampled into more than ``max_video_frames`` frames: for a family
    sampled by rate, a clip's length times the rate (the count is bounded by ``num_frames`` otherwise)."""
    if video_sampling(found) != "fps":
        return
    fps = sent_media_io(request, found, settings).get("video", {}).get("fps", VIDEO_FPS)
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
            also = "".join(f", {alias} ({target})" for alias, target in found.aliases.items())
            raise InputError(f"{found.spec.name} has no setting {key!r}; its settings: "
                             f"{', '.join(c.kwarg for c in found.controls) or 'none'}{also}")
        try:
            control.check(value)
        except ValueError as exc:
            raise InputError(str(exc)) from None


def check_request(request: ChatRequest, found: profile.Profile, settings: Settings) -> None:
    """Check ``request`` for the model ``found`` profiles against the limits, its controls and its video sampling;
    raise ``InputError`` with the reason."""
    spec = found.spec
    if not request.turns or request.turns[-1].role != "user":
        raise InputError("the conversation must end with a user message")
    if not request.turns[-1].text.strip() and not request.turns[-1].media:
        raise InputError("type a question or add an image")
    if request.detect:
        grounding_of(found, detect=True)  # the family has Detect mode
    if len(request.turns) > settings.max_turns:
        raise InputError(f"the conversation has {len(request.turns)} messages; the limit is "
                         f"{settings.max_turns} (clear the chat to go on)")
    for turn in request.turns:
        if len(turn.text) > settings.max_text_chars:
            raise InputError(f"a message is longer than {settings.max_text_chars:,} characters")
    if len(request.system) > settings.max_text_chars:
        raise InputError(f"the system prompt is longer than {settings.max_text_chars:,} characters")
    for modality in {m for t in request.turns for m, items in t.media.items() if items}:
        per_turn, per_conversation = settings.media_limits(modality)
        allowed = spec.engine_args.limit_mm_per_prompt.get(modality, 0)
        if not allowed:
            takes = ", ".join(m for m, n in spec.engine_args.limit_mm_per_prompt.items() if n) or "text only"
            raise InputError(f"{spec.name} does not take {modality} (it takes: {takes}); pick a model that does")
        # The app's limits count attachments (a document's pages are bounded by max_document_pages); the model's
        # limit_mm_per_prompt counts what vLLM gets, every page an image.
        n, total = request.turns[-1].count(modality), len(request.items(modality))
        pages = sum(1 for item in request.items(modality) if isinstance(item, Page))
        counted = f" ({pages} of them document pages)" if pages else ""
        fewer = " per prompt: choose fewer pages" if pages else ""
        if n > allowed:
            raise InputError(f"{_plural(n, modality)} in one message{counted}; {spec.name} takes at most {allowed}{fewer}")
        if total > allowed:
            raise InputError(f"the conversation holds {_plural(total, modality)}{counted}; {spec.name} takes at most "
                             f"{allowed} per prompt{': choose fewer pages' if pages else ''}")
        own = sum(1 for item in request.turns[-1].media.get(modality, ()) if not isinstance(item, Page))
        if own > per_turn:
            raise InputError(f"{_plural(own, modality)} in one message; the limit is {per_turn}")
        held = sum(1 for item in request.items(modality) if not isinstance(item, Page))
        if held > per_conversation:
            raise InputError(f"the conversation holds {_plural(held, modality)}; the limit is {per_conversation} "
                             "(clear the chat to go on)")
    check_media_io(request.media_io, settings)
    check_sampled_frames(request, found, settings)
    check_mm_kwargs(found, request.mm_kwargs)
    if request.mm_kwargs.get("use_audio_in_video"):  # (vLLM: "No audio stream found.")
        for video in request.items("video"):
            if getattr(video, "sound", None) is False:
                raise InputError(f"{video.name} has no sound track, and use_audio_in_video asks the model to hear "
                                 "it: turn that off for this video")


def _plural(n: int, noun: str) -> str:
    noun = "audio clip" if noun == "audio" else noun
    return f"{n} {noun}{'' if n == 1 else 's'}"
