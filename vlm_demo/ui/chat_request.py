"""The page's values as the chat service's typed input: the message read into a user turn (uploads decoded and
checked, then URLs fetched) and the model, sampling and controls checked into a ``ChatRequest``. Gradio-free."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import intake
from ..errors import InputError
from ..intake import (DocumentOptions, Page, Video, is_document_name, is_document_url, is_video_name, is_video_url,
                      page_ranges)
from ..registry import Registry, Sampling
from ..service import ChatRequest, Turn
from ..settings import Settings
from .overlays import OVERLAYS, image_file

if TYPE_CHECKING:
    from .controls import Controls


def chat_request(registry: Registry, controls: Controls, model: str, turns: Sequence[Turn], system: str,
                 sampling: Sequence[Any], values: Mapping[str, Any] | Sequence[Any]) -> ChatRequest:
    """The typed request for the page's values (``sampling``: temperature, top_p, max_tokens, seed; ``values``:
    the ``controls``' values); ``InputError`` for a value of the wrong type."""
    spec = registry.get(model)
    mm_kwargs = controls.mm_kwargs(model, values)
    temperature, top_p, max_tokens, seed = sampling
    try:
        params = Sampling(temperature=float(temperature), top_p=float(top_p), max_tokens=int(max_tokens),
                          seed=int(seed) if seed not in (None, "", -1) else None,
                          # models.yaml's own; the page has no control for these
                          ignore_eos=spec.sampling.ignore_eos, regex=spec.sampling.regex,
                          extra_args=spec.sampling.extra_args,
                          printable_only=spec.sampling.printable_only)
    except (TypeError, ValueError) as exc:
        raise InputError(f"sampling settings: {str(exc).splitlines()[0]}") from None
    each_page = bool(turns) and controls.each_page(values) and any(
        isinstance(item, Page) for item in turns[-1].media.get("image", ()))
    return ChatRequest(model=model, turns=tuple(turns), system=system or "", mm_kwargs=mm_kwargs,
                       sampling=params, media_io=controls.media_io(values), each_page=each_page)


async def read_message(message: dict | None, url_text: str | None, settings: Settings,
                       documents: DocumentOptions = DocumentOptions()) -> tuple[Turn, tuple[Any, ...]]:
    """The message as a user turn (uploads first, then URLs), and as the chat shows it: a PDF as the pages
    ``documents`` names, at its DPI. Counts are checked before anything is decoded; decoding, rasterising and
    checking run in worker threads, off the event loop."""
    message = message if isinstance(message, dict) else {}
    text = message.get("text", "") or ""
    if not isinstance(text, str):
        raise InputError("the message text must be a string")
    files = [f if isinstance(f, str) else (f or {}).get("path", "") for f in message.get("files", []) or []]
    links = [line.strip() for line in (url_text or "").splitlines() if line.strip()]
    videos = sum(1 for f in files if is_video_name(f)) + sum(1 for link in links if is_video_url(link))
    documents_n = sum(1 for f in files if is_document_name(f)) + sum(1 for link in links if is_document_url(link))
    for modality, n in (("image", len(files) + len(links) - videos - documents_n), ("video", videos)):
        per_turn, _ = settings.media_limits(modality)
        if n > per_turn:
            raise InputError(f"{n} {modality}s in one message; the limit is {per_turn}")
    loaded = [await intake.load_file(path, settings, name=Path(path).name, documents=documents)  # (not its folder)
              for path in files]
    items = [item for found in loaded for item in found]
    # A clip shows as its first frame (a browser plays few of the codecs vLLM decodes), a document as its first
    # page, each said in words
    firsts = [found[0] for found in loaded]
    pictures = [await asyncio.to_thread(image_file, item.poster, OVERLAYS)
                if isinstance(item, Video) and item.poster is not None else
                await asyncio.to_thread(image_file, item.image, OVERLAYS) if isinstance(item, Page) else path
                for path, item in zip(files, firsts, strict=True)]
    clips = "".join(f"\n[video: {item.name}, {item.duration_s:.1f} s; its first frame shown]"
                    for item in firsts if isinstance(item, Video))
    clips += "".join(f"\n[{document_text(found)}]" for found in loaded if isinstance(found[0], Page))
    for link in links:  # a URL, never a path on this server
        items += await intake.load_url(link, settings, documents=documents)
    shown = text + clips + "".join(
        f"\n[{'video' if is_video_url(link) else 'document' if is_document_url(link) else 'image'}: {link[:80]}]"
        for link in links)
    return Turn("user", text, intake.by_modality(items)), (*pictures, shown)



def document_text(pages: Sequence[Page]) -> str:
    """A document's pages in the chat, in words: "document: report.pdf, pages 1-3,7 of 8 at 144 dpi; page 1 shown"."""
    first = pages[0]
    which = f"page {first.number}" if len(pages) == 1 else f"pages {page_ranges([p.number for p in pages])}"
    return f"document: {first.source}, {which} of {first.page_count} at {first.dpi} dpi; page {first.number} shown"
