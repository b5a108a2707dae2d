"""Ovis2 (``AIDC-AI/Ovis2-2B``): AIMv2 ViT at 448 px, patch 14, hidden stride 2.

Each 448x448 crop gives (448 / 14 / 2)^2 = 256 visual tokens. An image is split into a grid of
up to ``max_partition`` crops (default 9) and, when the grid has more than one cell, the whole
image goes first as an extra crop. vLLM's own ``OvisProcessor`` expands ``<image>`` into
``<|image_pad|>`` ids: per crop one indicator plus 256 visual tokens, plus the trailing
indicators, so an image with an ``r x c`` grid takes ``259`` tokens when ``r * c == 1`` and
``257 * (r * c + 1) + 1`` otherwise (2571 for a 3x3 grid).

vLLM ships the config (``OvisConfig``) and processor classes for model type ``ovis``, so no
remote code is needed. The image processor is CLIP's, with center-crop off: Ovis resizes each
crop to fit 448 and pads it to a square itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, Control, ItemGeometry, KnownCount

#: Geometry of Ovis2-2B's visual tokenizer (aimv2-large-patch14-448).
IMAGE_SIZE = 448
PATCH_SIZE = 14
HIDDEN_STRIDE = 2


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The partition grid from the processor's ``grids``; each partition is resized on its own
    (long side <= 448), so there is no one processed size."""
    rows, cols = (int(v) for v in fields["grids"].reshape(-1)[-2:].tolist())
    return ItemGeometry(image.size if image else None, None, (rows, cols), rows * cols > 1)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Ovis's partition rule (fewest partitions covering enough of the image, else the best cover)."""
    side, segment = IMAGE_SIZE, 255  # (448 / 14 / 2)^2 - 1 pad tokens per visual atom
    max_partition, threshold = mm_kwargs.get("max_partition", 9), mm_kwargs.get("covering_threshold", 0.9)
    w, h = image.size

    def cells(rows: int, cols: int) -> list[tuple[int, int]]:  # width, height of each partition
        return [((w if c == cols - 1 else (c + 1) * (w // cols)) - c * (w // cols),
                 (h if r == rows - 1 else (r + 1) * (h // rows)) - r * (h // rows))
                for r in range(rows) for c in range(cols)]

    def covered(cw: int, ch: int) -> float:  # area of one partition kept after resizing to ``side``
        long, short = max(cw, ch), min(cw, ch)
        return side * (short / long * side) if long > side else long * short

    grids = [((rows, cols), sum(covered(*cell) for cell in cells(rows, cols)) / (w * h))
             for rows in range(1, max_partition + 1) for cols in range(1, max_partition + 1)
             if rows * cols <= max_partition]
    good = [g for g in grids if g[1] > threshold]
    (rows, cols), _ = (sorted(good, key=lambda g: (g[0][0] * g[0][1], -g[1])) if good
                       else sorted(grids, key=lambda g: (-g[1], g[0][0] * g[0][1])))[0]
    n = rows * cols  # pads: one per indicator token (start, prefix, separators, end) and ``segment`` per atom
    if (4 + segment if n == 1 else 3 + 2 * n + (1 + n) * segment) != count:
        return None
    return ItemGeometry(image.size, None, (rows, cols), n > 1)


ADAPTER = Adapter(
    name="ovis", title="Ovis2", model_types=("ovis",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<image>"},
    ranges_from_ids=False, controls=(Control("max_partition", label="max_partition (448 px partitions)", min=1, max=16, sizes_cache=True, default=9),),
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 1286, "max_partition 9: 2x2 partitions + the whole image = 5 atoms x 255 pads + 11 "
                   "indicator pads (Ovis2 preprocess, covering threshold 0.9)"),
        KnownCount((640, 480), 259, "max_partition 1: the whole image only, 255 + 4", {"max_partition": 1}),
    )},
)
