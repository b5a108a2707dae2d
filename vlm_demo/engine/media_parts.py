"""The media of a chat request on its way into vLLM's renderer and back out of it: the app's message parts as vLLM
takes them (image embeddings as torch tensors, a clip as a WAV at its model's rate), each item's decoded input in
prompt order, the error that names an item a template left out, and the frames vLLM's video loader sampled (small
copies for the contact sheet). ``renderer.Renderer`` uses them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from .types import PEAKS, SampledFrames, SentClip

AUDIO_IO = {"audio_backend": "soundfile"}
"""How vLLM's loader reads the app's clips (16-bit WAVs): libsndfile, the format's own reader (vLLM's "auto" tries
torchcodec first, which needs a system FFmpeg, and logs a warning for every clip)."""

def with_audio_io(media_io: Mapping[str, Mapping[str, Any]] | None,
                  mm_kwargs: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``media_io`` with the app's clips read by ``AUDIO_IO``, unless vLLM reads a video's own sound too
    (``use_audio_in_video``: an mp4's AAC, which libsndfile does not read; vLLM's "auto" chain does, with PyAV)."""
    if mm_kwargs.get("use_audio_in_video"):
        return dict(media_io or {})
    return {**(media_io or {}), "audio": {**AUDIO_IO, **(media_io or {}).get("audio", {})}}


AUDIO_RATE = 16_000
"""A clip's rate where the model's processor names none (Whisper-style feature extractors: every audio family
vLLM 0.32 serves here)."""

def _with_torch_embeds(message: dict[str, Any]) -> dict[str, Any]:
    """The message with image-embedding arrays (numpy, from media intake) as torch tensors."""
    content = message.get("content")
    if not isinstance(content, list) or not any(p.get("type") == "image_embeds" for p in content):
        return message
    import torch

    parts = [{**p, "image_embeds": {k: torch.from_numpy(v) for k, v in p["image_embeds"].items()}}
             if p.get("type") == "image_embeds" else p for p in content]
    return {**message, "content": parts}


def _inputs_by_modality(messages: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The decoded inputs of the messages' media parts, per modality, in prompt order (vLLM numbers
    items per modality in the order the parts come)."""
    found: dict[str, list[Any]] = {}
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type", "")
            if kind in ("image_pil", "image_embeds"):
                found.setdefault("image", []).append(part.get("image_pil"))
            elif kind == "audio_url":
                found.setdefault("audio", []).append(None)  # (a clip has no picture; its figures: the expansion's)
    return found


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _item_named(exc: BaseException) -> str:
    """"audio 1" for vLLM's "... for mm_items['audio'][0]" (else "an attachment")."""
    import re

    found = re.search(r"mm_items\['(\w+)'\]\[(\d+)\]", str(exc))
    return f"{found[1]} {int(found[2]) + 1}" if found else "an attachment"


def _with_audio_urls(message: dict[str, Any], rate: int) -> dict[str, Any]:
    """The message with each clip (the app's ``audio_clip`` part: a checked ``intake.Audio``) as the ``audio_url``
    part vLLM takes, a WAV at ``rate``, the model's own: resampled here (soxr), so vLLM does not resample."""
    content = message.get("content")
    if not isinstance(content, list) or not any(p.get("type") == "audio_clip" for p in content):
        return message
    parts = [{"type": "audio_url", "audio_url": {"url": p["audio_clip"].wav_data_url(rate)}}
             if p.get("type") == "audio_clip" else p for p in content]
    return {**message, "content": parts}


def _sent_clips(messages: Sequence[dict[str, Any]], rate: int) -> tuple[SentClip, ...]:
    """The messages' clips (``audio_clip`` parts) as they go to vLLM's processor at ``rate``, in prompt order."""
    import numpy as np

    found = []
    for message in messages:
        for part in _parts(message):
            if part.get("type") == "audio_clip":
                clip = part["audio_clip"]
                samples = np.abs(clip.at(rate))
                spans = np.array_split(samples, PEAKS) if len(samples) >= PEAKS else [samples]
                peaks = tuple(round(float(s.max(initial=0.0)), 3) for s in spans)
                found.append(SentClip(clip.name, clip.duration_s, clip.rate, clip.channels, rate, peaks))
    return tuple(found)


def _unwrap_plain_embeds(prompt: dict[str, Any]) -> None:
    """Embeddings that are one tensor (LLaVA) go to the engine as that tensor, as vLLM's server
    passes a tensor-only ``image_embeds``; the chat parser takes tensors only inside a dict."""
    data = prompt.get("multi_modal_data", {}).get("image")
    if isinstance(data, dict) and set(data) == {"image_embeds"}:
        prompt["multi_modal_data"]["image"] = data["image_embeds"]


THUMBNAIL_PX = 256
"""Longest side of a sampled video frame kept for the contact sheet."""


@dataclasses.dataclass(frozen=True)
class _Decoded:
    """One video as vLLM's loader sampled it."""

    sampled: SampledFrames
    """The sampled frames' indices and times, and their small copies (the contact sheet)."""
    first: Image.Image
    """The first sampled frame at full size (the video's geometry reads its size)."""


def _sampled(video: Any) -> _Decoded | None:
    """What vLLM's video loader gave for one video (``MediaWithBytes`` of ``(frames, metadata)``): the
    sampled frames' indices and times, and small copies of the frames."""
    frames, meta = getattr(video, "media", video)
    indices = tuple(int(i) for i in meta.get("frames_indices") or range(len(frames)))
    fps = float(meta.get("fps") or 0.0)
    array = frames.cpu().numpy() if hasattr(frames, "cpu") else frames
    if len(array) == 0:
        return None
    thumbnails = []
    for frame in array:
        picture = Image.fromarray(frame)
        picture.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        thumbnails.append(picture)
    return _Decoded(SampledFrames(
        indices=indices,
        timestamps_s=tuple(i / fps if fps > 0 else 0.0 for i in indices),
        total_frames=int(meta.get("total_num_frames") or len(indices)),
        fps=fps,
        duration_s=float(meta.get("duration") or 0.0),
        thumbnails=tuple(thumbnails),
    ), Image.fromarray(array[0]))
