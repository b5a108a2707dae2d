"""Gemma 3, as ``google/gemma-3-4b-it`` (``gemma3``: SigLIP at 896 px / patch 14, pooled to 256 tokens, + Gemma 3).

Each ``<start_of_image>`` becomes ``\\n\\n<start_of_image>`` + 256 ``<image_soft_token>`` + ``<end_of_image>\\n\\n``;
with pan-and-scan: "Here is the original image " + that + " and here are some crops to help you see better "
+ one per crop, space-separated.

Pan-and-scan (off by default) cuts an image whose aspect ratio is at least 1.2 into 2 to
``pan_and_scan_max_num_crops`` crops along its long side (one row for a landscape image, one column
for a portrait one), each crop at least ``pan_and_scan_min_crop_size`` px; the original is kept as the
global view, and it and every crop are resized to 896x896.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, Control, ItemGeometry, KnownCount

SIZE = 896
"""SigLIP input size: the original image and every crop are resized to 896x896."""
PATCH = 14
"""SigLIP patch size: 64x64 patches per view, average-pooled 4x4 to 16x16 = 256 tokens."""
TOKENS_PER_VIEW = 256
"""``mm_tokens_per_image`` / ``image_seq_length``: tokens per view (the original and each crop)."""
PAS_DEFAULTS = {"do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256, "pan_and_scan_max_num_crops": 4,
                "pan_and_scan_min_ratio_to_activate": 1.2}
"""Pan-and-scan settings the real checkpoint leaves to ``Gemma3ProcessorKwargs`` (its preprocessor config
has them null)."""

BOI, EOI, IMAGE_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
"""The tokens that open and close an image's view, and its feature token."""


def num_crops(width: int, height: int, mm_kwargs: Mapping[str, Any]) -> int:
    """``Gemma3ImageProcessor.pan_and_scan``'s crop count (0: no pan-and-scan) for an image and kwargs."""
    kw = {**PAS_DEFAULTS, **mm_kwargs}
    if not kw["do_pan_and_scan"]:
        return 0
    long, short = max(width, height), min(width, height)
    if long / short < kw["pan_and_scan_min_ratio_to_activate"]:
        return 0
    n = min(int(math.floor(long / kw["pan_and_scan_min_crop_size"])), int(math.floor(long / short + 0.5)))
    n = min(kw["pan_and_scan_max_num_crops"], max(2, n))
    crop_long = int(math.ceil(long / n))
    return n if min(crop_long, short) >= kw["pan_and_scan_min_crop_size"] else 0


def _views(image: Image.Image, crops: int) -> ItemGeometry:
    """The geometry of an image cut into ``crops`` pan-and-scan crops (0: the 896x896 view alone)."""
    if not crops:
        return ItemGeometry(image.size, (SIZE, SIZE), None, None)
    width, height = image.size
    return ItemGeometry(image.size, (SIZE, SIZE), (1, crops) if width >= height else (crops, 1), True)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Crops from the engine's own view count (``num_patches`` = crops + 1, the original first); the
    crop direction follows the image's long side. None when the pixel views are not 896x896 squares."""
    if image is None:
        return None
    views = int(fields["num_patches"])
    height, width = fields["pixel_values"].shape[-2:]
    if (width, height) != (SIZE, SIZE) or views != fields["pixel_values"].shape[0]:
        return None
    return _views(image, views - 1)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The pan-and-scan rule with the checkpoint's defaults and ``mm_kwargs``, if it gives ``count``."""
    crops = num_crops(*image.size, mm_kwargs)
    return _views(image, crops) if (crops + 1) * TOKENS_PER_VIEW == count else None


#: What vLLM puts for one image (``Gemma3Processor.full_image_sequence``), and with pan-and-scan crops
#: (``Gemma3ProcessingInfo.get_image_repl``): the original image, then the crops, in one phrase.
_VIEW = r"\n\n<start_of_image>(?:<image_soft_token>)+<end_of_image>\n\n"
_EXPANSION = re.compile(rf"Here is the original image {_VIEW} and here are some crops to help you see better "
                        rf"{_VIEW}(?: {_VIEW})*|{_VIEW}")


def unexpand(text: str) -> str:
    """The template's output from the decoded expanded prompt: each image's expansion back to ``<start_of_image>``."""
    return _EXPANSION.sub("<start_of_image>", text)


ADAPTER = Adapter(
    name="gemma3", title="Gemma 3", model_types=("gemma3",), feature_tokens={"image": IMAGE_TOKEN},
    placeholders={"image": BOI},
    # vLLM's range runs from the "\n\n" before <start_of_image> to the one after <end_of_image> (with
    # pan-and-scan: over the whole "Here is the original image ..." text), and those newlines merge with
    # the text's own ("\n\n\n"), so the ids alone do not give the ranges.
    ranges_from_ids=False,
    controls=(Control("do_pan_and_scan", label="pan-and-scan (extra 896 px crops, 256 tokens each)", kind="bool", sizes_cache=True, default=False),
              Control("pan_and_scan_max_num_crops", label="pan_and_scan_max_num_crops", min=1, max=8, sizes_cache=True, default=4),
              Control("pan_and_scan_min_crop_size", label="pan_and_scan_min_crop_size (px)", min=32, max=SIZE, default=256)),
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count}, unexpand=unexpand,
    known_counts={"image": (
        KnownCount((640, 480), 256, "pan-and-scan off (the checkpoint's default): one 896x896 view = "
                   "mm_tokens_per_image 256 (SigLIP 896/14 = 64x64 patches, pooled 4x4)"),
        KnownCount((640, 480), 768, "do_pan_and_scan: ratio 1.33 >= 1.2 -> max(2, min(640//256, round(1.33))) "
                   "= 2 crops of 320x480 + the original = 3 x 256", {"do_pan_and_scan": True}),
        KnownCount((1600, 400), 1280, "do_pan_and_scan: ratio 4 -> min(4 max crops, 1600//256, 4) = 4 crops "
                   "of 400x400 + the original = 5 x 256", {"do_pan_and_scan": True}),
        KnownCount((1600, 400), 768, "pan_and_scan_max_num_crops 2: 2 crops of 800x400 + the original = 3 x 256",
                   {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 2}),
    )},
)
