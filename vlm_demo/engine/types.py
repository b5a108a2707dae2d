"""Values the engine layer hands to the rest of the app (no vLLM types cross this boundary,
except the opaque ``RenderedPrompt.engine_input``). Multimodal data is keyed by modality
("image", "video"), never baked into field names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..families import ItemGeometry

__all__ = ["ItemGeometry", "ItemRange", "RenderedPrompt", "SampledFrames", "TokenDelta"]


@dataclass(frozen=True)
class ItemRange:
    """Where one multimodal item's placeholder tokens sit in the expanded prompt."""

    offset: int
    """Index of the first placeholder token in ``prompt_token_ids``."""
    length: int
    """Number of positions the item occupies (its feature tokens plus any markers inside)."""


@dataclass(frozen=True)
class SampledFrames:
    """The frames vLLM's own video loader sampled from one video (its metadata, as the processor got it)."""

    indices: tuple[int, ...]
    """Index of each sampled frame in the file."""
    timestamps_s: tuple[float, ...]
    """Where each sampled frame sits in the clip, in seconds (index / the file's fps)."""
    total_frames: int
    """Frames in the file, as the loader counted them."""
    fps: float
    """The file's frame rate."""
    duration_s: float
    """The clip's length, in seconds."""
    thumbnails: tuple[Any, ...] = ()
    """The sampled frames, scaled down (Pillow images), for the contact sheet."""


@dataclass(frozen=True)
class SentClip:
    """One clip as the app hands it to vLLM's processor: mono, resampled to the model's rate."""

    name: str
    """The clip's file name (or shortened URL)."""
    seconds: float
    """Its whole length."""
    rate_in: int
    """Its own sampling rate, as the file says."""
    channels: int
    """Channels in the file (mixed to one)."""
    rate: int
    """The rate it was sent at: the model's feature extractor's."""
    peaks: tuple[float, ...] = ()
    """Its waveform for drawing: the loudest sample of each of ``PEAKS`` equal spans, in [0, 1]."""


PEAKS = 480
"""Spans a clip's drawn waveform is made of."""


@dataclass(frozen=True)
class RenderedPrompt:
    """What vLLM's renderer produced for one request: exactly what generation consumes."""

    model: str
    """Registry name of the model."""
    family: str
    """Name of the family adapter that describes it ("generic" when none does)."""
    content_format: str
    """Content format vLLM detected for the chat template: "string" or "openai"."""
    conversation: tuple[dict[str, Any], ...]
    """The messages as the chat template saw them (placeholders inserted in "string" format)."""
    prompt: str
    """The chat template's output, before placeholders are expanded."""
    prompt_token_ids: tuple[int, ...]
    """The expanded token ids the engine runs on."""
    ranges: Mapping[str, tuple[ItemRange, ...]]
    """Per modality, one range per item, in prompt order."""
    geometry: Mapping[str, tuple[ItemGeometry, ...]]
    """Per modality, one geometry per item, in prompt order."""
    token_ids: Mapping[str, int]
    """Per modality, the id of the token that stands for the item's features inside each range."""
    placeholders: Mapping[str, str]
    """Per modality, the text that stands for one item in the chat template's output."""
    geometry_note: str | None
    """Why no tiles or grid are drawn (e.g. "no geometry adapter for llava_next"), else None."""
    mm_kwargs: dict[str, Any]
    """Per-request processor kwargs that were applied."""
    max_model_len: int
    """The engine's context window."""
    engine_input: Any
    """vLLM's engine input, handed unchanged to ``Engine.stream``."""
    media_io_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-request media loading options per modality (``{"video": {"num_frames": 8}}``), as sent."""
    frames: Mapping[str, tuple[SampledFrames | SentClip | None, ...]] = field(default_factory=dict)
    """Per time-based modality, one entry per item: a video's frames vLLM sampled, a clip as it was sent (None
    where the renderer does not say, e.g. a remote server's sampling)."""


@dataclass(frozen=True)
class TokenDelta:
    """New output of one streamed answer."""

    text: str
    """Text added since the previous delta."""
    num_tokens: int
    """Tokens added since the previous delta."""
    finish_reason: str | None
    """Set on the last delta ("stop", "length", ...)."""
    prompt_token_ids: tuple[int, ...] | None = None
    """On the first delta: the prompt ids the engine ran on (``RequestOutput.prompt_token_ids``)."""
    num_cached_tokens: int | None = None
    """Prompt tokens the engine served from its prefix cache (``RequestOutput.num_cached_tokens``, whole
    KV-cache blocks), once known; None where the engine does not say (a remote server without
    ``--enable-prompt-tokens-details``)."""
    reasoning: str = ""
    """Reasoning text added since the previous delta (a model entry with a ``reasoning_parser``); ``text``
    then holds only answer text."""
    reasoning_tokens: int = 0
    """How many of this delta's ``num_tokens`` are reasoning (up to and including the end marker)."""
