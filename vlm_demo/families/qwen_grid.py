"""The Qwen-VL grid rule, shared by the families whose vision encoder is Qwen-VL's (Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
dots.ocr, PaddleOCR-VL, GLM-OCR): a picture resized so each side is a multiple of one token cell (``factor`` px:
patch x merge) with its area within [min_pixels, max_pixels], one token per cell; a video's frames the same, one group
of cells per temporal patch. The geometry read from the processor's grids, the pixel bounds as controls (a picture's
and a video frame's), the names transformers wants them under, and the count rule a server's counts are checked by."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Control, CountGeometryFn, ItemGeometry


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


def video_pixel_controls(factor: int, max_pixels: int, start: tuple[int, int]) -> tuple[Control, Control]:
    """A video frame's own pixel bounds (``videos_kwargs.min_pixels`` / ``max_pixels``, the video processor's, where
    the unscoped pair applies to pictures and frames alike) in steps of one ``factor`` x ``factor`` token cell from one
    cell up to ``max_pixels``, starting at the checkpoint's video processor's ``start`` (min, max)."""
    cell = factor * factor
    per = f"({factor}x{factor} px per token)"
    return (Control("videos_kwargs.min_pixels", label=f"video frames: min_pixels {per}", step=cell, min=cell,
                    max=max_pixels, default=start[0]),
            Control("videos_kwargs.max_pixels", label=f"video frames: max_pixels {per}", step=cell, min=cell,
                    max=max_pixels, default=start[1]))


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
