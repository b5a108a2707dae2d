"""The pictures the page shows: each item's grid, tiles or crop drawn over it (the expansion panel's gallery) and an
answer's boxes drawn on its picture or page, as files named by content, drawn and encoded once. Gradio-free."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from .. import profile
from ..families.box_formats import Grounding
from ..grounding import draw as draw_boxes
from ..grounding import place
from ..grounding import rows as box_rows
from ..inspector import Expansion, Inspection, draw_overlay
from ..intake import Page, Recent, image_digest, picture
from ..service import ChatRequest, PageAnswer, page_requests
from ..settings import ENCODED_IMAGES_KEPT, OVERLAY_JPEG_QUALITY


OVERLAYS = Path(tempfile.gettempdir()) / "vlm-demo-overlays"  # the expansion panel's pictures, named by content


def image_file(image: Image.Image, folder: Path, jpeg: bool = False) -> str:
    """``image`` as a PNG (``jpeg``: a JPEG of ``OVERLAY_JPEG_QUALITY``) in ``folder``, named by its content and
    written whole (temp file, then rename).

    Gradio's own caching of PIL outputs rewrites one shared file in place, and a concurrent download of the
    same picture (16 users, one image) could read it half-written."""
    buf = io.BytesIO()
    if jpeg:
        image.convert("RGB").save(buf, format="JPEG", quality=OVERLAY_JPEG_QUALITY)
    else:
        image.save(buf, format="PNG", compress_level=1)
    data = buf.getvalue()
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.{'jpg' if jpeg else 'png'}"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    return str(path)


_OVERLAY_FILES = Recent(ENCODED_IMAGES_KEPT)


def overlay_file(image: Image.Image, expansion: Expansion, center_crop: bool) -> str:
    """The expansion picture of one image (its grid or crop drawn over it) as a file; drawn and encoded once
    per picture and grid (all ``draw_overlay`` reads), since every turn shows the earlier images again."""
    def draw() -> str:
        return image_file(draw_overlay(image, expansion, center_crop=center_crop), OVERLAYS, jpeg=True)
    key = (image_digest(image), expansion.grid, center_crop)
    path = _OVERLAY_FILES.get(key, draw)
    return path if os.path.exists(path) else draw()  # type: ignore[arg-type]  # (a cleaned temp folder)


@dataclasses.dataclass
class Boxes:
    """The boxes and points of one streaming answer, drawn on the picture they refer to (the conversation's last
    image), in its own pixels with the geometry the engine's processor reported."""

    grounding: Grounding
    """The family's box format."""
    image: Image.Image
    """The picture the boxes are drawn on."""
    expansion: Expansion
    """Its expansion (the processed size a format's pixels refer to)."""
    drawn: tuple[tuple[Any, ...], str | None] = ((), None)
    """The last items placed and their picture (drawn again only when they change)."""

    @classmethod
    def of(cls, model: Any, request: ChatRequest, inspection: Inspection) -> Boxes | PageBoxes | None:
        """The answer's boxes where the family has a format and the conversation an image, else None; a document
        read page by page: each page's (``PageBoxes``)."""
        grounding = profile.profile_of(model).adapter.grounding
        if grounding is not None and request.each_page:
            return PageBoxes(grounding, tuple(page for page, _ in page_requests(request)))
        images = [picture(item) for item in request.items("image")]
        expansions = inspection.items.get("image", ())
        if grounding is None or not images or not expansions or images[-1] is None:
            return None
        return cls(grounding, images[-1], expansions[-1])

    def update(self, answer: str, pages: Sequence[PageAnswer] = ()) -> tuple[tuple[str, ...], list[list[Any]]]:
        """The picture (a file; none without items) and the table rows for the answer so far."""
        placed = place(self.grounding.parse(answer), self.grounding, self.image.size, self.expansion.processed_size)
        if placed != self.drawn[0]:
            self.drawn = (placed, image_file(draw_boxes(self.image, placed), OVERLAYS) if placed else None)
        return (self.drawn[1],) if self.drawn[1] else (), box_rows(placed)


@dataclasses.dataclass
class PageBoxes:
    """The boxes of a document read page by page: each page's answer's, drawn on that page in its own pixels with
    the geometry its own request's render reported, as each answer streams; one table, each row's label after its
    page ("page 2: 3 Title")."""

    grounding: Grounding
    """The family's box format."""
    pages: tuple[Page, ...]
    """The pages asked, in page order (as ``page_requests`` splits the request)."""
    boxes: dict[int, Boxes] = dataclasses.field(default_factory=dict)
    """Each page's boxes, once its render is known."""

    def update(self, answer: str, pages: Sequence[PageAnswer] = ()) -> tuple[tuple[str, ...], list[list[Any]]]:
        """The pictures of the pages with boxes so far, in page order, and the table rows of all pages."""
        figures: list[str] = []
        rows: list[list[Any]] = []
        for i, (page, part) in enumerate(zip(self.pages, pages, strict=False)):
            if part.vision is None or not part.answer:
                continue
            boxes = self.boxes.setdefault(i, Boxes(self.grounding, page.image, part.vision))
            drawn, table = boxes.update(part.answer)
            figures += drawn
            rows += [[f"page {page.number}: {row[0]}", *row[1:]] for row in table]
        return tuple(figures), rows
