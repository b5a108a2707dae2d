"""Qwen2.5-VL (``Qwen/Qwen2.5-VL-3B-Instruct``): patch 14, merge 2 -> one token per 28x28 px.

The image is resized so each side is a multiple of 28 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 28x28 cell.
"""

from __future__ import annotations

from . import box_formats
from .base import Adapter, KnownCount
from .qwen_grid import SIZE_ALIASES, count_rule, geometry, pixel_controls, video_geometry, video_pixel_controls

#: The checkpoint's preprocessor_config.json bounds on the resized area.
MIN_PIXELS, MAX_PIXELS = 3136, 12845056
#: Its video processor's bounds on each frame's area (transformers' ``Qwen2VLVideoProcessor``: 128 and 768
#: tokens of 28x28 px, as qwen-vl-utils' VIDEO_MIN_PIXELS / VIDEO_MAX_PIXELS).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28


ADAPTER = Adapter(
    name="qwen2_5_vl", title="Qwen2.5-VL", model_types=("qwen2_5_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(*pixel_controls(28, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS)),
              # per video frame only (the unscoped pair above applies to images and frames alike)
              *video_pixel_controls(28, MAX_PIXELS, (VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS))),
    grounding=box_formats.QWEN2_5_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, 28)},
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                   "(preprocessor_config.json: patch 14, merge 2, min_pixels 3136, max_pixels 12845056)"),
        KnownCount((640, 480), 117, "max_pixels 100352 (128x28x28): 364x252 -> 9x13 cells",
                   {"max_pixels": 100352}),
    )},
)
