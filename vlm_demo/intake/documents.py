"""Document intake: a PDF becomes the pages a request names, each a picture rasterised with pypdfium2 at the
request's DPI and knowing its document's name, its 1-based number and its size in points. Every page goes to vLLM
as one image; the panels name it "page 3 of report.pdf".

PDFium is not thread-safe: this process reads one document at a time (``_PDFIUM``), always in a worker thread
(``intake.load_file``), never on the page's event loop. Pages are kept by (document digest, page, DPI), so moving
another control, or asking again, rasterises nothing twice.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from ..errors import InputError
from ..settings import DOCUMENT_DPI, DOCUMENT_DPI_RANGE, DOCUMENT_PAGES_KEPT, Settings
from .cache import Recent

DOCUMENT_SUFFIXES = (".pdf",)
"""File names read as documents."""
PDF_MAGIC = b"%PDF-"
"""How a PDF file begins (PDFium finds it within the first 1024 bytes, as readers do)."""
POINTS_PER_INCH = 72.0
FPDF_ERR_PASSWORD = 4
"""PDFium's error code for a document that needs a password."""

_PDFIUM = threading.Lock()
"""PDFium's one user at a time in this process."""
_PAGES = Recent(DOCUMENT_PAGES_KEPT)
_OUTLINES = Recent(DOCUMENT_PAGES_KEPT)


@dataclass(frozen=True)
class DocumentOptions:
    """How a request reads its documents: the resolution and which pages."""

    dpi: int = DOCUMENT_DPI
    """Rasterising resolution, dots per inch (``DOCUMENT_DPI_RANGE``)."""
    pages: str = ""
    """Which pages, 1-based: "1-3,7"; "" every page (up to ``Settings.max_document_pages``)."""


@dataclass(frozen=True)
class Page:
    """One page of a document as a picture: the image vLLM gets, and where it came from."""

    image: Image.Image
    """The rasterised page (RGB)."""
    source: str
    """The document's file name."""
    number: int
    """The page's number in its document, from 1."""
    size_pt: tuple[float, float]
    """The page's width and height in points (1/72 inch), as the PDF gives them."""
    dpi: int
    """The resolution it was rasterised at."""
    page_count: int
    """Pages in the document."""

    @property
    def label(self) -> str:
        """"page 3 of report.pdf"."""
        return f"page {self.number} of {self.source}"


@dataclass(frozen=True)
class _Outline:
    """A document's pages as its file gives them: their count and sizes in points."""

    sizes_pt: tuple[tuple[float, float], ...]


def is_document_name(name: str | Path) -> bool:
    """Whether a file name (or a URL's path) is a document's."""
    return str(name).lower().endswith(DOCUMENT_SUFFIXES)


def page_numbers(text: str, count: int, limit: int, name: str) -> tuple[int, ...]:
    """The 1-based pages ``text`` names ("1-3, 7"; "" every page, the first ``limit`` where there are more) in a
    document of ``count`` pages, in the order given, each once; ``InputError`` for a range outside the document,
    one that is not a range, or more than ``limit`` pages."""
    text = (text or "").strip()
    if not text:
        return tuple(range(1, min(count, limit) + 1))
    chosen: list[int] = []
    for part in text.split(","):
        found = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not found:
            raise InputError(f"{name}: pages {text!r}: write pages as 1-3,7")
        first, last = int(found[1]), int(found[2] or found[1])
        if first < 1 or last < first:
            raise InputError(f"{name}: pages {part.strip()!r}: a range goes from page 1 up, its first page first")
        if last > count:
            raise InputError(f"{name}: page {last} is outside the document ({count} page{'s' if count != 1 else ''})")
        if last - first + 1 + len(chosen) > limit:  # (before listing a huge range)
            raise InputError(f"{name}: pages {text!r} name more than {limit} pages; the limit per document is {limit}")
        chosen += [p for p in range(first, last + 1) if p not in chosen]
    return tuple(chosen)


def page_ranges(numbers: Sequence[int]) -> str:
    """Pages as ``page_numbers`` reads them back: consecutive ones as a range ("1-3,7")."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def check_dpi(dpi: object) -> int:
    """``dpi`` as a whole number in ``DOCUMENT_DPI_RANGE``; ``InputError`` otherwise."""
    low, high = DOCUMENT_DPI_RANGE
    if isinstance(dpi, float) and dpi.is_integer():
        dpi = int(dpi)
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not low <= dpi <= high:
        raise InputError(f"dpi must be a whole number in {low}..{high} (got {dpi!r})")
    return dpi


def check_document(source: str | Path | bytes, settings: Settings, name: str | None = None) -> int:
    """Check a PDF as a whole, drawing no page (an attached file, before any request says which pages at which
    DPI): its size, that it is a PDF that opens without a password, its page count and page sizes; the pages it
    has. ``InputError`` as ``load_document``'s."""
    name, data = _read(source, settings, name)
    return len(_OUTLINES.get(_digest(data), lambda: _outline(data, name, settings)).sizes_pt)  # type: ignore[attr-defined]


def _read(source: str | Path | bytes, settings: Settings, name: str | None) -> tuple[str, bytes]:
    """The file's name for messages and its bytes, checked to be a PDF within the upload limit."""
    name = name or (Path(source).name if isinstance(source, (str, Path)) else "the document")
    try:
        data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from None
    if len(data) > settings.max_upload_bytes:
        raise InputError(f"{name}: file is larger than {settings.max_upload_bytes:,} bytes")
    if PDF_MAGIC not in data[:1024]:
        raise InputError(f"{name}: not a PDF (it does not begin as one)")
    return name, data


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def load_document(source: str | Path | bytes, settings: Settings, options: DocumentOptions = DocumentOptions(),
                  name: str | None = None) -> tuple[Page, ...]:
    """The pages ``options`` names of one PDF, rasterised at its DPI (kept by document, page and DPI). Bad input
    raises ``InputError`` naming the file as ``name`` (default: the path given) and the limit it broke."""
    dpi = check_dpi(options.dpi)
    name, data = _read(source, settings, name)
    digest = _digest(data)
    outline: _Outline = _OUTLINES.get(digest, lambda: _outline(data, name, settings))  # type: ignore[assignment]
    numbers = page_numbers(options.pages, len(outline.sizes_pt), settings.max_document_pages, name)
    for number in numbers:  # every page's size is checked before any is drawn
        w_pt, h_pt = outline.sizes_pt[number - 1]
        w, h = math.ceil(w_pt * dpi / POINTS_PER_INCH), math.ceil(h_pt * dpi / POINTS_PER_INCH)  # (as PDFium draws)
        if w * h > settings.max_image_pixels:
            fits = int(POINTS_PER_INCH * math.sqrt(settings.max_image_pixels / (w_pt * h_pt)))
            advice = (f"at most {fits} dpi fits" if fits >= DOCUMENT_DPI_RANGE[0] else
                      f"a {w_pt / POINTS_PER_INCH:.0f} x {h_pt / POINTS_PER_INCH:.0f} inch page is too large at any dpi")
            raise InputError(f"{name}: page {number} at {dpi} dpi is {w}x{h} px; the limit is "
                             f"{settings.max_image_pixels:,} pixels ({advice})")
    return tuple(Page(_PAGES.get((digest, number, dpi), lambda n=number: _draw(data, n, dpi, name)),  # type: ignore[misc]
                      name, number, outline.sizes_pt[number - 1], dpi, len(outline.sizes_pt)) for number in numbers)


def _open(data: bytes, name: str):  # noqa: ANN202 - pypdfium2's document
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        # PDFium's last error is per process and a failure need not set it (a file with an empty page tree reads
        # "Success", or the previous file's error): the password is believed where the file has an /Encrypt entry
        if getattr(exc, "err_code", None) == FPDF_ERR_PASSWORD and b"/Encrypt" in data:
            raise InputError(f"{name}: the PDF is encrypted (password protected); save an unprotected copy") from None
        raise InputError(f"{name}: not a readable PDF (broken, truncated, or with no pages)") from None


def _outline(data: bytes, name: str, settings: Settings) -> _Outline:
    with _PDFIUM:
        pdf = _open(data, name)
        try:
            count = len(pdf)
            if count < 1:
                raise InputError(f"{name}: the PDF has no pages")
            if count > settings.max_document_page_count:
                raise InputError(f"{name}: {count:,} pages; the limit is {settings.max_document_page_count:,} pages "
                                 "per document")
            sizes = []
            for i in range(count):
                page = pdf[i]
                try:
                    w, h = page.get_size()
                finally:
                    page.close()
                if not (w > 0 and h > 0):
                    raise InputError(f"{name}: page {i + 1} has no area ({w:g} x {h:g} pt)")
                sizes.append((round(w, 2), round(h, 2)))
            return _Outline(tuple(sizes))
        finally:
            pdf.close()


def _draw(data: bytes, number: int, dpi: int, name: str) -> Image.Image:
    """Page ``number`` of the document, rasterised at ``dpi`` on white (forms drawn), as RGB."""
    import pypdfium2 as pdfium

    with _PDFIUM:
        pdf = _open(data, name)
        try:
            page = pdf[number - 1]
            try:
                bitmap = page.render(scale=dpi / POINTS_PER_INCH, may_draw_forms=True)
                drawn = bitmap.to_pil()  # (on the bitmap's own buffer: copied before it goes)
                image = drawn.convert("RGB") if drawn.mode != "RGB" else drawn.copy()
                bitmap.close()
            except pdfium.PdfiumError as exc:
                raise InputError(f"{name}: page {number} could not be drawn ({exc})") from None
            finally:
                page.close()
        finally:
            pdf.close()
    return image
