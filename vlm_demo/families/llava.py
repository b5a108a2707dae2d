"""LLaVA-1.5 (``llava-hf/llava-1.5-7b-hf``): CLIP ViT-L/14 at 336 px -> 576 image tokens.

The image is resized (short side 336) and center-cropped to 336x336; ``<image>`` expands to 576
``<image>`` ids whatever the image size. No per-request kwargs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, ItemGeometry, KnownCount

SIZE, PATCH = 336, 14
"""CLIP ViT-L/14 at 336 px: the crop's side and the patch side ((336/14)^2 = 576 tokens)."""


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The crop the vision tower saw (336x336); no grid."""
    h, w = fields["pixel_values"].shape[-2:]
    return ItemGeometry(image.size if image else None, (int(w), int(h)), None, None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """One token per 14-px patch of the square input."""
    side = math.isqrt(count)
    return ItemGeometry(image.size, (side * PATCH, side * PATCH), None, None) if side * side == count else None


ADAPTER = Adapter(
    name="llava", title="LLaVA-1.5", model_types=("llava",), feature_tokens={"image": "<image>"},
    placeholders={"image": "<image>"}, center_crop=True, geometry={"image": geometry},
    geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 576, "CLIP 336 px crop, patch 14: (336/14)^2 = 576 for any image size"),
        KnownCount((320, 900), 576, "the same crop for a tall image"),
    )},
)
