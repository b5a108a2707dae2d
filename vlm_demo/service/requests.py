"""What goes into the chat service and what comes out: a request (the conversation, its settings) and the typed
events of its answer; the conversation as the OpenAI chat messages vLLM renders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine import RenderedPrompt
from ..errors import InputError
from ..inspector import Inspection
from ..intake import Audio, ImageEmbeds, Page, Video
from ..registry import Sampling


@dataclass(frozen=True)
class Turn:
    """One message of a conversation."""

    role: Literal["user", "assistant"]
    """Who said it."""
    text: str
    """What was said."""
    media: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Attachments per modality (user turns only): ``{"image": (decoded RGB images, documents' pages or
    precomputed image embeddings, ...), "video": (checked videos, ...)}``."""

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

    each_page: bool = False
    """Read the question's documents page by page: one request per page, sent together (``service.pages``)."""

    def items(self, modality: str) -> tuple[Any, ...]:
        """The conversation's attachments of ``modality``, in prompt order (as vLLM numbers them)."""
        return tuple(item for turn in self.turns for item in turn.media.get(modality, ()))


@dataclass(frozen=True)
class Rendered:
    """The engine's rendered input, before generation starts."""

    rendered: RenderedPrompt
    """Prompt text, expanded token ids and image ranges, exactly as the engine gets them."""
    inspection: Inspection
    """The inspector's view of ``rendered``."""
    sampling: Sampling | None = None
    """The sampling the engine gets (``max_tokens`` cut to the room left, Detect mode's grammar)."""
    pages: tuple[Inspection | None, ...] = ()
    """A document read page by page: every page's own request's inspection, in page order (None for a page
    refused before its render); ``rendered`` and ``inspection`` are the first rendered page's. Empty otherwise."""


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
class Prefilling:
    """The engine has the request and no token has come yet: it encodes the request's pictures (every view or
    frame of them) and reads its prompt. Said once a second after the first (a quick prefill says nothing)."""

    model: str
    """Registry name of the model."""
    what: str
    """What the engine works on, in words ("7 views of 1 picture, 903 vision tokens, in a 1,024-token prompt")."""
    seconds: float
    """Seconds since the engine got the request."""
    waited_s: float = 0.0
    """Seconds the request waited for the engine to start before that (0 where it was running)."""


@dataclass(frozen=True)
class Figures:
    """An answer's figures, as far as it went: the one record every event, page and shown answer carries."""

    tokens: int = 0
    """Tokens generated (reasoning included)."""
    ttft_s: float = 0.0
    """Seconds from the request reaching the engine (rendering included) to the first token; for a request that
    waited for its engine to start, from the engine being ready (the render came before, during the wait)."""
    tokens_per_s: float = 0.0
    """Generated tokens per second after the first one (0 for a single token)."""
    finish_reason: str | None = None
    """Why generation ended ("stop", "length"); None while it streams."""
    prompt_tokens: int = 0
    """Prompt tokens the engine ran on (once done)."""
    cached_tokens: int = 0
    """Prompt tokens served from vLLM's prefix cache (whole KV-cache blocks; 0 where the engine does not say)."""
    reasoning_tokens: int = 0
    """How many of ``tokens`` are reasoning: the generated tokens up to and including the end marker."""
    wait_s: float = 0.0
    """Seconds the request waited for the model's engine to start (0 when it was running)."""
    pages: int = 0
    """A document read page by page: how many pages (0 otherwise)."""
    total_s: float = 0.0
    """A document read page by page: seconds from the send to the last page's last token."""


@dataclass(frozen=True)
class Delta:
    """New answer (or reasoning) text."""

    text: str
    """Text added since the previous event."""
    answer: str
    """The answer so far."""
    reasoning: str = ""
    """The reasoning so far (a model entry with a ``reasoning_parser``); ``answer`` holds only what follows it."""
    figures: Figures = Figures()
    """The answer's figures so far."""
    pages: tuple[PageAnswer, ...] = ()
    """A document read page by page: each page's answer and figures so far, in page order (empty otherwise)."""


@dataclass(frozen=True)
class PageAnswer:
    """One page's answer and figures in a document read page by page."""

    label: str
    """"page 3 of report.pdf"."""
    figures: Figures = Figures()
    """Its figures (its first token from its request reaching the engine)."""
    done_s: float | None = None
    """Seconds from the document's send to its last token (None while it streams)."""
    failed: str = ""
    """Why it failed ("": it did not)."""
    vision: Any = None
    """The page's picture's ``Expansion`` as its own request rendered it (its vision tokens), None where it failed
    before its render (or, streaming, before the render came)."""
    answer: str = ""
    """Its answer (so far)."""


@dataclass(frozen=True)
class Done:
    """The answer is complete."""

    answer: str
    """The whole answer."""
    figures: Figures
    """Its figures."""
    reasoning: str = ""
    """The whole reasoning, split off by the entry's ``reasoning_parser`` ("" without one); the next turn's
    prompt keeps only ``answer``, as the thinking models' chat templates do with earlier turns."""
    pages: tuple[PageAnswer, ...] = ()
    """A document read page by page: each page's answer and figures, in page order (empty otherwise)."""


@dataclass(frozen=True)
class Failed:
    """The request failed; nothing else changed."""

    message: str
    """What to tell the user."""


Event = Rendered | Waiting | Prefilling | Delta | Done | Failed


def to_openai_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The conversation as OpenAI-style chat messages, images as decoded ``image_pil`` parts. A turn of attachments
    and no words has no text part: the image alone, as a reader's card sends a page (LightOnOCR's template writes a
    newline for an empty text part, one token the card's prompt does not have)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": [{"type": "text", "text": request.system}]})
    for turn in request.turns:
        parts = [_part(modality, item) for modality, items in turn.media.items() for item in items]
        if turn.text or not parts:
            parts.append({"type": "text", "text": turn.text})
        messages.append({"role": turn.role, "content": parts})
    return messages


def _part(modality: str, item: Any) -> dict[str, Any]:
    """One attachment as a chat content part (a video as the ``video_url`` part ``vllm serve`` takes: vLLM's
    own loader decodes and samples it)."""
    if modality == "image":
        if isinstance(item, ImageEmbeds):
            return {"type": "image_embeds", "image_embeds": dict(item.tensors)}
        return {"type": "image_pil", "image_pil": item.image if isinstance(item, Page) else item}
    if modality == "video" and isinstance(item, Video):
        return {"type": "video_url", "video_url": {"url": item.data_url()}}
    if modality == "audio" and isinstance(item, Audio):
        return {"type": "audio_clip", "audio_clip": item}  # (the engine sends it at its model's rate)
    raise InputError(f"{modality} attachments are not supported")
