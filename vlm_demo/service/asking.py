"""One request, one way: what a front end was asked (the page and its API, the command line, the cost tool and its MCP
twin) as an ``Ask``, read into a user turn by ``ask_turn`` and made the one ``ChatRequest`` by ``request_of``. What
every front end used to decide on its own is decided here once: a document's dpi (the ask's, else the model family's,
else ``DOCUMENT_DPI``), the counts of attachments (before anything is decoded), the processor settings under their
controls' names, the sampling (the entry's, with what was asked over it), and whether a document is read page by page
(split by ``page_requests`` everywhere)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .. import intake, profile
from ..errors import InputError
from ..intake import DocumentOptions, Page, is_document_name, is_document_url, is_video_name, is_video_url
from ..registry import ModelSpec, flat_kwargs
from ..settings import DOCUMENT_DPI, Settings
from .requests import ChatRequest, Turn


@dataclass(frozen=True)
class Source:
    """One attachment as a front end got it, not read yet."""

    where: str
    """A file's path, or a URL (http(s), ``data:``)."""
    origin: Literal["upload", "url", "file"] = "file"
    """"upload": a file the page's server received (named by its own name, never the server's folder); "url": a URL a
    person gave (never a path on the server); "file": the command line's (a path or a URL)."""
    kind: intake.Kind | None = None
    """What it is where the front end says (the command line's ``--video``, ``--image-embeds``); None: from its
    name."""

    def modality(self) -> str:
        """What it counts as before it is read: "audio", "video", "document" or "image"."""
        url = self.origin == "url" or intake.is_url(self.where)
        if self.kind == "audio" or (self.kind is None and (intake.is_audio_url(self.where) if url
                                                           else intake.is_audio_name(self.where))):
            return "audio"
        if self.kind == "video" or (self.kind is None and (is_video_url(self.where) if url else
                                                          is_video_name(self.where))):
            return "video"
        if self.kind in (None, "image") and (is_document_url(self.where) if url else is_document_name(self.where)):
            return "document"
        return "image"


@dataclass(frozen=True)
class Ask:
    """What a front end was asked: the model, the question and its attachments, and the settings it goes with."""

    model: str
    """Registry name of the model."""
    text: str = ""
    """The question."""
    sources: tuple[Source, ...] = ()
    """Its attachments, in order."""
    system: str = ""
    """System prompt ("" for the template's default)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The model's processor settings, by control name (or a name its checkpoint's docs use: ``size.longest_edge``
    for Qwen's ``max_pixels``), nested or dotted."""
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """Sampling asked for over the entry's own (``temperature``, ``top_p``, ``max_tokens``, ``seed``)."""
    video: Mapping[str, Any] = field(default_factory=dict)
    """How clips are sampled (``num_frames``, ``fps``)."""
    pages: str = ""
    """Which pages of each document ("1-3,7"; "": all, up to the settings' limit)."""
    dpi: int = 0
    """The resolution documents are rasterised at (0: the model family's, else ``DOCUMENT_DPI``)."""
    each_page: bool = False
    """Read a document page by page (where the question holds pages)."""


def documents_of(model: ModelSpec | profile.Profile, pages: str = "", dpi: int = 0) -> DocumentOptions:
    """How ``model``'s requests read documents: ``dpi`` where given, else its family's, else ``DOCUMENT_DPI``."""
    return DocumentOptions(dpi=dpi or profile.profile_of(model).adapter.document_dpi or DOCUMENT_DPI, pages=pages or "")


def check_counts(sources: Sequence[Source], settings: Settings) -> None:
    """Refuse more attachments of a modality than one message may carry, before anything is read."""
    found = [s.modality() for s in sources]
    for modality, n in (("image", sum(m == "image" for m in found)), ("video", found.count("video")),
                        ("audio", found.count("audio"))):
        per_turn, _ = settings.media_limits(modality)
        if n > per_turn:
            noun = "audio clip" if modality == "audio" else modality
            raise InputError(f"{n} {noun}s in one message; the limit is {per_turn}")


async def read_source(source: Source, settings: Settings, documents: DocumentOptions) -> tuple[intake.Attachment, ...]:
    """What one source gives (a document: its pages as ``documents`` names them), decoded and checked."""
    if source.origin == "upload":
        return await intake.load_file(source.where, settings, source.kind, name=Path(source.where).name,
                                      documents=documents)
    if source.origin == "url":
        return await intake.load_url(source.where, settings, source.kind, documents=documents)
    return await intake.load(source.where, settings, source.kind, documents=documents)


async def read_turn(text: str, sources: Sequence[Source], settings: Settings,
                    documents: DocumentOptions) -> tuple[Turn, list[tuple[intake.Attachment, ...]]]:
    """A question and its sources as a user turn (a document's pages as ``documents`` names them), and what each source
    gave, in order; the counts are checked before anything is read."""
    if not isinstance(text, str):
        raise InputError("the message text must be a string")
    check_counts(sources, settings)
    read = [await read_source(source, settings, documents) for source in sources]
    return Turn("user", text, intake.by_modality([item for found in read for item in found])), read


async def ask_turn(ask: Ask, found: profile.Profile, settings: Settings
                   ) -> tuple[Turn, list[tuple[intake.Attachment, ...]]]:
    """The ask's question as a user turn (``read_turn``), its documents read as ``documents_of`` says for its model
    (``found``: the model's profile)."""
    return await read_turn(ask.text, ask.sources, settings, documents_of(found, ask.pages, ask.dpi))


def request_of(ask: Ask, found: profile.Profile, turns: Sequence[Turn]) -> ChatRequest:
    """The one request for ``ask`` over ``turns`` (the conversation, ending with the ask's question); ``found``: the
    profile of the ask's model, resolved once by the caller and handed down."""
    spec = found.spec
    sampling = dict(ask.sampling)
    if sampling.get("seed") in ("", -1):
        sampling["seed"] = None
    try:
        chosen = replace(spec.sampling, **sampling)
    except (TypeError, ValueError) as exc:
        raise InputError(f"sampling settings: {str(exc).splitlines()[0]}") from None
    clips = any(turn.media.get("video") for turn in turns)  # (how clips are sampled goes where there are clips)
    video = {k: v for k, v in ask.video.items() if v is not None and not (k == "fps" and not v)} if clips else {}
    pages = bool(turns) and any(isinstance(item, Page) for item in turns[-1].media.get("image", ()))
    return ChatRequest(model=ask.model, turns=tuple(turns), system=ask.system or "",
                       mm_kwargs=found.control_names(flat_kwargs(dict(ask.settings))),
                       sampling=chosen, media_io={"video": video} if video else {}, each_page=ask.each_page and pages)


async def ask_request(ask: Ask, models: profile.Profiles, settings: Settings,
                      history: Sequence[Turn] = ()) -> ChatRequest:
    """The one request for ``ask`` after ``history``: its attachments read, its settings as the request carries them
    (``models``: the profiles of the caller's models; the ask's is resolved once)."""
    found = models.get(ask.model)
    turn, _ = await ask_turn(ask, found, settings)
    return request_of(ask, found, (*history, turn))
