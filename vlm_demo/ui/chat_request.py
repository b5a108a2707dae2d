"""The page's values as the chat service's typed input: what the page asks (``page_ask``: the model, sampling and
controls checked), the message's uploads and URL lines read into a user turn, and the ``ChatRequest`` made of them
the one way every front end makes it (``service.asking``). Gradio-free."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..intake import DocumentOptions, Page, Video, is_audio_url, is_document_url, is_video_url, page_ranges
from ..service import Ask, ChatRequest, Source, Turn, read_turn, request_of
from ..settings import Settings
from .overlays import OVERLAYS, image_file

if TYPE_CHECKING:
    from .controls import Controls


def page_ask(controls: Controls, model: str, system: str, sampling: Sequence[Any],
             values: Mapping[str, Any] | Sequence[Any], text: str = "", sources: tuple[Source, ...] = ()) -> Ask:
    """What the page asks for, from its values (``sampling``: temperature, top_p, max_tokens, seed; ``values``: the
    ``controls``' values, each checked against its control); ``InputError`` for a value of the wrong type."""
    temperature, top_p, max_tokens, seed = sampling
    try:
        asked = {"temperature": float(temperature), "top_p": float(top_p), "max_tokens": int(max_tokens),
                 "seed": int(seed) if seed not in (None, "", -1) else None}
    except (TypeError, ValueError) as exc:
        raise InputError(f"sampling settings: {str(exc).splitlines()[0]}") from None
    documents = controls.documents(values)
    return Ask(model=model, text=text, sources=sources, system=system or "", settings=controls.mm_kwargs(model, values),
               sampling=asked, video=controls.media_io(values).get("video", {}), pages=documents.pages,
               dpi=documents.dpi, each_page=controls.each_page(values))


def chat_request(controls: Controls, model: str, turns: Sequence[Turn], system: str, sampling: Sequence[Any],
                 values: Mapping[str, Any] | Sequence[Any]) -> ChatRequest:
    """The typed request for the page's values over ``turns`` (the conversation and the typed message), made as
    every front end makes it (``service.request_of``) with the model's profile as the controls hold it."""
    return request_of(page_ask(controls, model, system, sampling, values), controls.models.get(model), turns)


def message_sources(message: dict | None, url_text: str | None) -> tuple[str, tuple[Source, ...]]:
    """The message's text and its attachments as sources: its uploads, then the URL box's lines."""
    message = message if isinstance(message, dict) else {}
    text = message.get("text", "") or ""
    files = [f if isinstance(f, str) else (f or {}).get("path", "") for f in message.get("files", []) or []]
    links = [line.strip() for line in (url_text or "").splitlines() if line.strip()]
    return text, (*(Source(f, "upload") for f in files), *(Source(link, "url") for link in links))


async def read_message(message: dict | None, url_text: str | None, settings: Settings,
                       documents: DocumentOptions = DocumentOptions()) -> tuple[Turn, tuple[Any, ...]]:
    """The message as a user turn (uploads first, then URLs: ``service.read_turn``, as every front end reads its
    attachments), and as the chat shows it: a PDF as the pages ``documents`` names, at its DPI. Counts are checked
    before anything is decoded; decoding, rasterising and checking run in worker threads, off the event loop."""
    text, given = message_sources(message, url_text)
    turn, read = await read_turn(text, given, settings, documents)
    uploads = [(s.where, found) for s, found in zip(given, read, strict=True) if s.origin == "upload"]
    # A clip shows as its first frame (a browser plays few of the codecs vLLM decodes), a document as its first
    # page, each said in words
    pictures = [await asyncio.to_thread(image_file, found[0].poster, OVERLAYS)
                if isinstance(found[0], Video) and found[0].poster is not None else
                await asyncio.to_thread(image_file, found[0].image, OVERLAYS) if isinstance(found[0], Page) else path
                for path, found in uploads]
    clips = "".join(f"\n[video: {found[0].name}, {found[0].duration_s:.1f} s; its first frame shown]"
                    for _, found in uploads if isinstance(found[0], Video))
    clips += "".join(f"\n[{document_text(found)}]" for _, found in uploads if isinstance(found[0], Page))
    links = [s.where for s in given if s.origin == "url"]
    def kind(link: str) -> str:
        return ("audio" if is_audio_url(link) else "video" if is_video_url(link) else "document"
                if is_document_url(link) else "image")
    shown = text + clips + "".join(f"\n[{kind(link)}: {link[:80]}]" for link in links)
    return turn, (*pictures, shown)



def document_text(pages: Sequence[Page]) -> str:
    """A document's pages in the chat, in words: "document: report.pdf, pages 1-3,7 of 8 at 144 dpi; page 1 shown"."""
    first = pages[0]
    which = f"page {first.number}" if len(pages) == 1 else f"pages {page_ranges([p.number for p in pages])}"
    return f"document: {first.source}, {which} of {first.page_count} at {first.dpi} dpi; page {first.number} shown"
