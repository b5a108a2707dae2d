"""Media intake, the only way attachments come in (the page, its API and the CLI alike): a path, an ``http(s)``
URL or a ``data:`` URL becomes a checked attachment (an RGB image, precomputed image embeddings or a video's own
bytes), keyed by the modality it goes to vLLM as. vLLM never fetches a URL or reads a path on a user's behalf.

``images``: image and embeddings intake; ``video``: video intake (OpenCV, as vLLM decodes); ``audio``: clips
(soundfile and PyAV, resampled with soxr); ``documents``: a PDF's pages as pictures (pypdfium2); ``containers``: pure parsing of video containers; ``urls``: the guarded way in for
URLs; ``cache``: the per-process caches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from PIL import Image

from ..settings import Settings
from .audio import AUDIO_SUFFIXES, Audio, is_audio_name, load_audio
from .cache import Recent
from .containers import sniff_video, track_kinds
from .documents import DOCUMENT_SUFFIXES, DocumentOptions, Page, check_document, is_document_name, load_document, page_ranges
from .images import ImageEmbeds, image_digest, load_image, load_image_embeds, png_data_url
from .urls import (is_audio_url, is_document_url, is_url, is_video_url, load_audio_url, load_document_url,
                   load_image_url, load_video_url)
from .video import VIDEO_SUFFIXES, Video, is_video_name, load_video

__all__ = ["AUDIO_SUFFIXES", "DOCUMENT_SUFFIXES", "VIDEO_SUFFIXES", "Attachment", "Audio", "is_audio_name", "load_audio", "DocumentOptions", "ImageEmbeds", "Kind", "Page", "Recent", "Video",
           "by_modality", "check_file", "image_digest", "is_audio_url", "is_document_name", "is_document_url", "is_url", "is_video_name", "is_video_url", "load",
           "load_all", "load_document", "load_file", "load_image", "load_image_embeds", "load_url", "load_video",
           "page_ranges", "picture", "png_data_url"]

Attachment = Image.Image | ImageEmbeds | Video | Page | Audio
"""One checked attachment (a document's page is an image to vLLM)."""
Kind = Literal["image", "image_embeds", "video", "audio"]
"""What a source is when its caller knows (the CLI's ``--image``, ``--image-embeds``, ``--video``, ``--audio``); an
image source that is a PDF gives its pages."""


async def load(source: str | Path, settings: Settings, kind: Kind | None = None, name: str | None = None,
               documents: DocumentOptions = DocumentOptions()) -> tuple[Attachment, ...]:
    """What a source that is a file or a URL gives (the CLI's arguments; the page takes its uploads with
    ``load_file`` and its URL box with ``load_url``): one attachment, or a document's pages (those ``documents``
    names, at its DPI), decoded and checked in a worker thread (a large picture or a clip would otherwise hold up
    every other user's stream). ``kind`` None: taken from the source (``.safetensors``: image embeddings; a video
    file name, a URL whose path has one or a ``data:video/`` URL: a video; a ``.pdf`` file: a document; else an
    image). ``name``: how an error names a file (the page's uploads: the file's own name, not the server's
    folder)."""
    text = str(source)
    if is_url(text):
        return await load_url(text, settings, kind, documents)
    return await load_file(text, settings, kind, name, documents)


async def load_file(path: str | Path, settings: Settings, kind: Kind | None = None, name: str | None = None,
                    documents: DocumentOptions = DocumentOptions()) -> tuple[Attachment, ...]:
    """What a file (never a URL) gives, as ``load`` reads a file."""
    text = str(path)
    if kind is None:
        kind = ("image_embeds" if text.endswith(".safetensors") else "audio" if is_audio_name(name or text) else
                "video" if is_video_name(text) else "image")
        if kind == "video" and await asyncio.to_thread(_sound_only, Path(text)):
            kind = "audio"  # (a recording: the microphone's WebM holds sound alone)
    if kind == "audio":
        return (await asyncio.to_thread(load_audio, Path(text), settings, name),)
    if kind == "image_embeds":
        return (await asyncio.to_thread(load_image_embeds, Path(text), settings),)
    if kind == "image" and is_document_name(name or text):
        return await asyncio.to_thread(load_document, Path(text), settings, documents, name)
    read = load_video if kind == "video" else load_image
    return (await asyncio.to_thread(read, Path(text), settings, name),)


def _sound_only(path: Path) -> bool:
    """Whether a video-named file's container lists sound and no picture (a microphone's WebM recording)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return False  # (the video intake says why it cannot be read)
    container = sniff_video(head)
    kinds = track_kinds(head, container) if container else None
    return bool(kinds) and "audio" in kinds and "video" not in kinds


async def check_file(path: str | Path, settings: Settings, name: str | None = None) -> None:
    """Check an attached file as a question would take it (``load_file``; a document as a whole, drawing no page:
    which pages at which DPI is the question's); ``InputError`` says why not."""
    if is_document_name(name or str(path)):
        await asyncio.to_thread(check_document, Path(path), settings, name)
    else:
        await load_file(path, settings, name=name)


async def load_url(url: str, settings: Settings, kind: Kind | None = None,
                   documents: DocumentOptions = DocumentOptions()) -> tuple[Attachment, ...]:
    """What a URL a person gave gives (the page's URL box: never a path on the server, which ``urls.check_url``
    refuses), fetched or decoded under the URL rules: one picture or clip, or a PDF's pages (``documents``);
    ``kind`` None: as ``is_audio_url``, ``is_video_url`` and ``is_document_url`` say."""
    if kind == "audio" or (kind is None and is_audio_url(url)):
        return (await load_audio_url(url, settings),)
    if kind == "video" or (kind is None and is_video_url(url)):
        return (await load_video_url(url, settings),)
    if kind in (None, "image") and is_document_url(url):
        return await load_document_url(url, settings, documents)
    return (await load_image_url(url, settings),)


async def load_all(sources: Iterable[tuple[str | Path, Kind | None]], settings: Settings,
                   documents: DocumentOptions = DocumentOptions()) -> list[Attachment]:
    """What each (source, kind) gives (``load``), in order."""
    return [item for source, kind in sources for item in await load(source, settings, kind, documents=documents)]


def picture(item: Attachment) -> Image.Image | None:
    """The picture an image attachment shows (a document's page: its rasterised image); None for the others."""
    if isinstance(item, Page):
        return item.image
    return item if isinstance(item, Image.Image) else None


def by_modality(items: Sequence[Attachment]) -> dict[str, tuple[Attachment, ...]]:
    """Attachments keyed by the modality they go to vLLM as (image embeddings are images), in order; a modality
    with none is left out."""
    found = {"image": tuple(i for i in items if not isinstance(i, (Video, Audio))),
             "video": tuple(i for i in items if isinstance(i, Video)),
             "audio": tuple(i for i in items if isinstance(i, Audio))}
    return {modality: group for modality, group in found.items() if group}
