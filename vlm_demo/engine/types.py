"""Values the engine layer hands to the rest of the app (no vLLM types cross this boundary,
except the opaque ``RenderedPrompt.engine_input``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageRange:
    """Where one image's placeholder tokens sit in the expanded prompt."""

    offset: int
    """Index of the first placeholder token in ``prompt_token_ids``."""
    length: int
    """Number of positions the image occupies (its image tokens plus any markers inside)."""


@dataclass(frozen=True)
class ImageGeometry:
    """How the engine's image processor treated one image."""

    orig_size: tuple[int, int] | None
    """Width and height of the image as uploaded (None for precomputed embeddings)."""
    processed_size: tuple[int, int] | None
    """Width and height the vision encoder saw (resized / tiled canvas), where the family resizes."""
    grid: tuple[int, int] | None
    """Rows and columns: InternVL tiles, Ovis partitions, Qwen 28-px token cells; None for LLaVA."""
    thumbnail: bool | None
    """Whether a global thumbnail view was added (tiling families); None where there is no such view."""


@dataclass(frozen=True)
class RenderedPrompt:
    """What vLLM's renderer produced for one request: exactly what generation consumes."""

    model: str
    """Registry name of the model."""
    content_format: str
    """Content format vLLM detected for the chat template: "string" or "openai"."""
    conversation: tuple[dict[str, Any], ...]
    """The messages as the chat template saw them (placeholders inserted in "string" format)."""
    prompt: str
    """The chat template's output, before image placeholders are expanded."""
    prompt_token_ids: tuple[int, ...]
    """The expanded token ids the engine runs on."""
    image_ranges: tuple[ImageRange, ...]
    """One range per image, in prompt order."""
    images: tuple[ImageGeometry, ...]
    """One geometry per image, in prompt order."""
    image_token_id: int
    """Id of the token that stands for image features inside each range."""
    placeholder: str
    """Text that stands for one image in the chat template's output."""
    mm_kwargs: dict[str, Any]
    """Per-request image-processor kwargs that were applied."""
    max_model_len: int
    """The engine's context window."""
    engine_input: Any
    """vLLM's engine input, handed unchanged to ``Engine.stream``."""


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
