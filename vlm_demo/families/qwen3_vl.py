"""Qwen3-VL (``Qwen/Qwen3-VL-2B-Instruct``): patch 16, merge 2 -> one token per 32x32 px.

The image is resized so each side is a multiple of 32 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 32x32 cell.

vLLM 0.32 takes ``min_pixels`` / ``max_pixels`` per request and folds them into the image processor's
``size`` (``shortest_edge`` / ``longest_edge``); ``size`` itself is honoured too.
"""

from __future__ import annotations

from . import box_formats
from .base import Adapter, KnownCount
from .qwen_grid import SIZE_ALIASES, count_rule, geometry, pixel_controls, video_geometry, video_pixel_controls

#: The checkpoint's preprocessor_config.json bounds on the resized image area (``size``).
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
#: The checkpoint's video_preprocessor_config.json bounds (frames x area).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 4096, 25165824
PATCH, MERGE = 16, 2
FACTOR = PATCH * MERGE  # pixels per token side


ADAPTER = Adapter(
    name="qwen3_vl", title="Qwen3-VL", model_types=("qwen3_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(*pixel_controls(FACTOR, MAX_PIXELS, (65536, MAX_PIXELS)),
              # per video frame only (video_preprocessor_config.json's own bounds)
              *video_pixel_controls(FACTOR, VIDEO_MAX_PIXELS, (VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS))),
    grounding=box_formats.QWEN3_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    known_counts={"image": (
        KnownCount((640, 480), 300, "smart_resize(480, 640, factor 32) = 480x640 -> 15x20 cells "
                   "(preprocessor_config.json: patch 16, merge 2, size shortest_edge 65536, longest_edge 16777216)"),
        KnownCount((320, 320), 100, "smart_resize(320, 320, factor 32) = 320x320 -> 10x10 cells (area 102400 "
                   "within the default bounds)"),
        KnownCount((640, 480), 117, "max_pixels 131072 (128x32x32): 416x288 -> 9x13 cells",
                   {"max_pixels": 131072}),
        KnownCount((320, 320), 256, "min_pixels 262144 (256x32x32): 512x512 -> 16x16 cells",
                   {"min_pixels": 262144}),
    )},
)
