"""Media intake, the only way attachments come in (the page, its API and the CLI alike): a path, an ``http(s)``
URL or a ``data:`` URL becomes a checked attachment (an RGB image, precomputed image embeddings or a video's own
bytes), keyed by the modality it goes to vLLM as. vLLM never fetches a URL or reads a path on a user's behalf.

``images``: image and embeddings intake; ``video``: video intake (OpenCV, as vLLM decodes); ``containers``: pure
parsing of video containers; ``urls``: the guarded way in for URLs; ``cache``: the per-process caches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from PIL import Image

from ..settings import Settings
from .cache import Recent
from .images import ImageEmbeds, image_digest, load_image, load_image_embeds, png_data_url
from .urls import is_url, is_video_url, load_image_url, load_video_url
from .video import VIDEO_SUFFIXES, Video, is_video_name, load_video

__all__ = ["VIDEO_SUFFIXES", "Attachment", "ImageEmbeds", "Kind", "Recent", "Video", "by_modality", "image_digest",
           "is_url", "is_video_name", "is_video_url", "load", "load_all", "load_file", "load_image",
           "load_image_embeds", "load_url", "load_video", "png_data_url"]

Attachment = Image.Image | ImageEmbeds | Video
"""One checked attachment."""
Kind = Literal["image", "image_embeds", "video"]
"""What a source is when its caller knows (the CLI's ``--image``, ``--image-embeds``, ``--video``)."""


async def load(source: str | Path, settings: Settings, kind: Kind | None = None,
               name: str | None = None) -> Attachment:
    """One attachment from a source that is a file or a URL (the CLI's arguments; the page takes its uploads with
    ``load_file`` and its URL box with ``load_url``), decoded and checked in a worker thread (a large picture or a
    clip would otherwise hold up every other user's stream). ``kind`` None: taken from the source (``.safetensors``: image embeddings;
    a video file name, a URL whose path has one or a ``data:video/`` URL: a video; else an image). ``name``: how
    an error names a file (the page's uploads: the file's own name, not the server's folder)."""
    text = str(source)
    if is_url(text):
        return await load_url(text, settings, kind)
    return await load_file(text, settings, kind, name)


async def load_file(path: str | Path, settings: Settings, kind: Kind | None = None,
                    name: str | None = None) -> Attachment:
    """One attachment from a file (never a URL), as ``load`` reads a file."""
    text = str(path)
    if kind is None:
        kind = "image_embeds" if text.endswith(".safetensors") else "video" if is_video_name(text) else "image"
    if kind == "image_embeds":
        return await asyncio.to_thread(load_image_embeds, Path(text), settings)
    read = load_video if kind == "video" else load_image
    return await asyncio.to_thread(read, Path(text), settings, name)


async def load_url(url: str, settings: Settings, kind: Kind | None = None) -> Attachment:
    """One attachment from a URL a person gave (the page's URL box: never a path on the server, which
    ``urls.check_url`` refuses), fetched or decoded under the URL rules; ``kind`` None: as ``is_video_url`` says."""
    video = kind == "video" if kind is not None else is_video_url(url)
    return await (load_video_url(url, settings) if video else load_image_url(url, settings))


async def load_all(sources: Iterable[tuple[str | Path, Kind | None]], settings: Settings) -> list[Attachment]:
    """``load`` of each (source, kind), in order."""
    return [await load(source, settings, kind) for source, kind in sources]


def by_modality(items: Sequence[Attachment]) -> dict[str, tuple[Attachment, ...]]:
    """Attachments keyed by the modality they go to vLLM as (image embeddings are images), in order; a modality
    with none is left out."""
    found = {"image": tuple(i for i in items if not isinstance(i, Video)),
             "video": tuple(i for i in items if isinstance(i, Video))}
    return {modality: group for modality, group in found.items() if group}
