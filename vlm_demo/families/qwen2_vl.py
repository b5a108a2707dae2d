"""Qwen2-VL (``Qwen/Qwen2-VL-2B-Instruct``): patch 14, merge 2 -> one token per 28x28 px.

The image is resized so each side is a multiple of 28 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 28x28 cell.
"""

from __future__ import annotations

from . import box_formats
from .base import Adapter, KnownCount
from .qwen_grid import SIZE_ALIASES, count_rule, geometry, pixel_controls, video_geometry, video_pixel_controls

#: The checkpoint's preprocessor_config.json bounds on the resized area (images and video frames).
MIN_PIXELS, MAX_PIXELS = 3136, 12845056
FACTOR = 28  # 14-px patches, 2x2 merged into one token


ADAPTER = Adapter(
    name="qwen2_vl", title="Qwen2-VL", model_types=("qwen2_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(*pixel_controls(FACTOR, MAX_PIXELS, (3136, MAX_PIXELS)),
              # per video frame only: the checkpoint's video processor takes preprocessor_config.json's bounds
              *video_pixel_controls(FACTOR, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS))),
    grounding=box_formats.QWEN2_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                   "(preprocessor_config.json: patch 14, merge 2, min_pixels 3136, max_pixels 12845056)"),
        KnownCount((640, 480), 117, "max_pixels 100352 (128x28x28): 364x252 -> 9x13 cells",
                   {"max_pixels": 100352}),
    )},
)
