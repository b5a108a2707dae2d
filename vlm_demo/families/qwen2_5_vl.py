"""Qwen2.5-VL (``Qwen/Qwen2.5-VL-3B-Instruct``): patch 14, merge 2 -> one token per 28x28 px.

The image is resized so each side is a multiple of 28 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 28x28 cell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from . import grounding
from .base import Adapter, Control, CountGeometryFn, ItemGeometry, KnownCount

#: The checkpoint's preprocessor_config.json bounds on the resized area.
MIN_PIXELS, MAX_PIXELS = 3136, 12845056
#: Its video processor's bounds on each frame's area (transformers' ``Qwen2VLVideoProcessor``: 128 and 768
#: tokens of 28x28 px, as qwen-vl-utils' VIDEO_MIN_PIXELS / VIDEO_MAX_PIXELS).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The resized size and its grid of token cells, from ``image_grid_thw`` (in patches); the Qwen-VL
    families share it (Qwen2-VL and 2.5: 14-px patches, 28-px cells; Qwen3-VL: 16 and 32)."""
    _, h, w = (int(v) for v in fields["image_grid_thw"].tolist())
    patch, merge = hf_config.vision_config.patch_size, hf_config.vision_config.spatial_merge_size
    return ItemGeometry(image.size if image else None, (w * patch, h * patch), (h // merge, w // merge), None)


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """A video's frames from ``video_grid_thw``: each temporal patch (``temporal_patch_size`` frames, 2) is one
    group of one token per cell of the resized frame; the Qwen-VL families share it."""
    t, h, w = (int(v) for v in fields["video_grid_thw"].tolist())
    patch, merge = hf_config.vision_config.patch_size, hf_config.vision_config.spatial_merge_size
    rows, cols = h // merge, w // merge
    return ItemGeometry(image.size if image else None, (w * patch, h * patch), (rows, cols), None,
                        groups=(rows * cols,) * t)


def resized(width: int, height: int, min_pixels: int, max_pixels: int, factor: int = 28) -> tuple[int, int]:
    """Qwen's ``smart_resize``: each side a multiple of ``factor``, the area within the bounds."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def pixel_controls(factor: int, max_pixels: int, start: tuple[int, int], low: int | None = None,
                   max_low: int | None = None) -> tuple[Control, Control]:
    """A Qwen-style processor's image pixel bounds as controls: ``min_pixels`` and ``max_pixels`` in steps of one
    ``factor`` x ``factor`` token cell up to ``max_pixels``, starting at the checkpoint's ``start`` (min, max);
    ``low``: the least value (one cell unless said), ``max_low``: the least ``max_pixels`` (``low`` unless said). The
    largest ``max_pixels`` sizes the engine's encoder cache."""
    cell = factor * factor
    low = cell if low is None else low
    per = f"({factor}x{factor} px per token)"
    return (Control("min_pixels", label=f"min_pixels {per}", step=cell, min=low, max=max_pixels, default=start[0]),
            Control("max_pixels", label=f"max_pixels {per}", step=cell, min=low if max_low is None else max_low,
                    max=max_pixels, sizes_cache=True, default=start[1]))


SIZE_ALIASES = {"min_pixels": "size.shortest_edge", "max_pixels": "size.longest_edge"}
"""The Qwen-VL processors' pixel bounds as transformers 5.19 wants them (``min_pixels`` / ``max_pixels`` call
kwargs are deprecated, to go in 5.23); the controls keep the names people know."""


def count_rule(min_pixels: int, max_pixels: int, factor: int) -> CountGeometryFn:
    """The remote geometry of a Qwen-VL family: its resize rule with the request's bounds, resolved as
    vLLM does (the checkpoint's ``size``, then the request's ``size``, then ``min_pixels`` /
    ``max_pixels``); shown only when it gives the server's count."""
    def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
        kwargs = {**mm_kwargs, **(mm_kwargs.get("images_kwargs") or {})}  # the images' own scope wins
        size = {"shortest_edge": min_pixels, "longest_edge": max_pixels, **(kwargs.get("size") or {})}
        w, h = resized(*image.size, kwargs.get("min_pixels", size["shortest_edge"]),
                       kwargs.get("max_pixels", size["longest_edge"]), factor)
        if (h // factor) * (w // factor) != count:
            return None
        return ItemGeometry(image.size, (w, h), (h // factor, w // factor), None)
    return geometry_from_count


ADAPTER = Adapter(
    name="qwen2_5_vl", title="Qwen2.5-VL", model_types=("qwen2_5_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(*pixel_controls(28, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS)),
              # per video frame only (the unscoped pair above applies to images and frames alike)
              Control("videos_kwargs.min_pixels", label="video frames: min_pixels (28x28 px per token)",
                      step=784, min=784, max=MAX_PIXELS, default=VIDEO_MIN_PIXELS),
              Control("videos_kwargs.max_pixels", label="video frames: max_pixels (28x28 px per token)",
                      step=784, min=784, max=MAX_PIXELS, default=VIDEO_MAX_PIXELS)),
    grounding=grounding.QWEN2_5_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, 28)},
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                   "(preprocessor_config.json: patch 14, merge 2, min_pixels 3136, max_pixels 12845056)"),
        KnownCount((640, 480), 117, "max_pixels 100352 (128x28x28): 364x252 -> 9x13 cells",
                   {"max_pixels": 100352}),
    )},
)
