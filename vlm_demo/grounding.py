"""Boxes and points from an answer, in the uploaded picture's pixels: pure functions.

The family's format (``families.box_formats``) parses the answer; ``place`` maps each item from the format's
space to the original image with the geometry the engine's processor reported (for Qwen2.5-VL the processed
size from ``image_grid_thw``); ``draw`` and ``rows`` show them; ``to_json`` is ``ground --json``, ``cells`` a
document reader's page as ``read --json`` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from .families.box_formats import Found, Grounding

COLOURS = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
           (240, 50, 230), (210, 245, 60))
"""Distinct colours of successive labels (Sasha Trubetskoy's list)."""


@dataclass(frozen=True)
class Placed:
    """One box or point in the original image's pixels (floats)."""

    label: str
    box: tuple[float, float, float, float] | None = None
    point: tuple[float, float] | None = None
    text: str | None = None
    """A reader's cell: its text (``Found.text``)."""
    order: int | None = None
    """A reader's cell: its place in the reading order, from 1 (``Found.order``)."""

    @property
    def tag(self) -> str:
        """What the picture writes beside it: the label, after the reading order where there is one."""
        return f"{self.order} {self.label}".strip() if self.order is not None else self.label


def place(found: Sequence[Found], grounding: Grounding, orig_size: tuple[int, int],
          processed_size: tuple[int, int] | None) -> tuple[Placed, ...]:
    """The items mapped to ``orig_size`` pixels; items with a value outside the format's space (beyond the
    processed image, or above the relative scale, or negative) are left out, and boxes with no area. A box given
    corner to corner the other way round ([x2, y2, x1, y1]) is the rectangle between its corners, as Qwen's own
    cookbook draws it (random weights write such boxes in 3 of 4 answers: Detect then drew nothing). A
    ``processed`` format without a known processed size maps nothing."""
    w, h = orig_size
    if grounding.space == "processed":
        if processed_size is None:
            return ()
        top_x, top_y = processed_size
    else:
        top_x = top_y = grounding.scale
    sx, sy = w / top_x, h / top_y

    def inside(x: float, y: float) -> bool:
        return 0 <= x <= top_x and 0 <= y <= top_y

    out: list[Placed] = []
    for item in found:
        if item.box is not None:
            (x1, x2), (y1, y2) = sorted(item.box[0::2]), sorted(item.box[1::2])
            if inside(x1, y1) and inside(x2, y2) and x2 > x1 and y2 > y1:
                out.append(Placed(item.label, box=(x1 * sx, y1 * sy, x2 * sx, y2 * sy), text=item.text,
                                  order=item.order))
        elif item.point is not None and inside(*item.point):
            out.append(Placed(item.label, point=(item.point[0] * sx, item.point[1] * sy), text=item.text,
                              order=item.order))
    return tuple(out)


def colour_of(label: str, labels: Sequence[str]) -> tuple[int, int, int]:
    """The colour of ``label``: one per distinct label, in order of first appearance."""
    distinct = list(dict.fromkeys(labels))
    return COLOURS[distinct.index(label) % len(COLOURS)] if label in distinct else COLOURS[0]


CJK_FONTS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
             "/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc")
"""Where Debian's fonts-noto-cjk puts its sans font (the container image and the test system install it)."""


def label_font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """The font labels are drawn in: Noto Sans CJK where installed (a label may be Chinese: InternVL's grounding
    answers name things in the question's language), else Pillow's own (Latin only: other scripts as boxes)."""
    path = next((p for p in CJK_FONTS if Path(p).is_file()), None)
    return ImageFont.truetype(path, size) if path else ImageFont.load_default(size=size)


def draw(image: Image.Image, placed: Sequence[Placed]) -> Image.Image:
    """The picture with each box (outline) and point (dot) drawn in its label's colour, the label (a reader's
    cell: its reading order and category, "3 Text") on a filled tag of the same colour in black or white,
    whichever reads better."""
    out = image.convert("RGB").copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    width = max(2, round(min(w, h) / 150))
    font = label_font(max(12, round(min(w, h) / 30)))
    labels = [p.label for p in placed]
    for item in placed:
        colour = colour_of(item.label, labels)
        ink = (0, 0, 0) if sum(c * k for c, k in zip(colour, (0.299, 0.587, 0.114), strict=True)) > 150 else (255,) * 3
        if item.box is not None:
            x1, y1, x2, y2 = item.box
            d.rectangle([x1, y1, x2, y2], outline=colour, width=width)
            anchor = (x1, y1)
        else:
            x, y = item.point
            r = width * 3
            d.ellipse([x - r, y - r, x + r, y + r], fill=colour, outline=(255, 255, 255), width=max(1, width // 2))
            anchor = (x + r, y + r)
        if item.tag:
            left, top, right, bottom = d.textbbox((0, 0), item.tag, font=font)
            tw, th = right - left + 6, bottom - top + 6
            tx = min(max(0, anchor[0]), max(0, w - tw))
            ty = anchor[1] - th if anchor[1] - th >= 0 else min(anchor[1], max(0, h - th))
            d.rectangle([tx, ty, tx + tw, ty + th], fill=colour)
            d.text((tx + 3 - left, ty + 3 - top), item.tag, fill=ink, font=font)
    return out


def rows(placed: Sequence[Placed]) -> list[list[Any]]:
    """The table: label (a reader's cell: its tag, "3 Title", as drawn), x1, y1, x2, y2 (a point: x, y, x, y) in
    original pixels, rounded to 0.1."""
    out = []
    for item in placed:
        x1, y1, x2, y2 = item.box if item.box is not None else (*item.point, *item.point)  # type: ignore[misc]
        out.append([item.tag, *(round(v, 1) for v in (x1, y1, x2, y2))])
    return out


def to_json(model: str, grounding: Grounding, orig_size: tuple[int, int], processed_size: tuple[int, int] | None,
            placed: Sequence[Placed]) -> dict[str, Any]:
    """The ``ground --json`` object (a reader's cells with their ``text`` and ``order``)."""
    return {"model": model, "image_size": list(orig_size),
            "processed_size": list(processed_size) if processed_size else None, "format": grounding.name,
            "boxes": [{"label": p.label, "box": list(p.box), **_cell_fields(p)} for p in placed if p.box is not None],
            "points": [{"label": p.label, "point": list(p.point), **_cell_fields(p)} for p in placed
                       if p.point is not None]}


def _cell_fields(item: Placed) -> dict[str, Any]:
    return {k: v for k, v in (("text", item.text), ("order", item.order)) if v is not None}


def cells(placed: Sequence[Placed]) -> list[dict[str, Any]]:
    """A reader's page as data: per box, in reading order, its ``order``, ``category``, ``text`` (None where the
    format carries none) and ``box`` in the page picture's pixels (x1, y1, x2, y2, rounded to 0.1)."""
    return [{"order": p.order, "category": p.label, "text": p.text, "box": [round(v, 1) for v in p.box]}
            for p in sorted(placed, key=lambda p: p.order or 0) if p.box is not None]
