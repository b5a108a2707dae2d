"""LLaVA-OneVision, as ``llava-hf/llava-onevision-qwen2-0.5b-ov-hf`` (SigLIP 384 px / patch 14 + Qwen2).

Each ``<image>`` becomes 729 base-view tokens (27x27) plus the anyres tiles of the best-fit pinpoint
(384-px tiles, up to 6x6), unpadded to the image's aspect, pooled to ~9 tiles' worth, one newline per row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, ItemGeometry, KnownCount

TILE = 384
"""SigLIP input size: the base view and every anyres tile are 384x384."""
PATCH = 14
"""SigLIP patch size: 384 // 14 = 27 features per side, 729 per tile."""
MAX_TILES = 9
"""``anyres_max_9``: tile features above ~9 tiles' worth are pooled down."""
PINPOINTS = [[h, w] for h in range(TILE, 6 * TILE + 1, TILE) for w in range(TILE, 6 * TILE + 1, TILE)]
"""``image_grid_pinpoints`` of the real checkpoint: (height, width), 1x1 to 6x6 tiles of 384 px."""


def _best_resolution(height: int, width: int, pinpoints: list[list[int]]) -> tuple[int, int]:
    """The pinpoint (height, width) the image is resized into: transformers' ``select_best_resolution``."""
    best, best_effective, best_wasted = (0, 0), 0, math.inf
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = pin_w * pin_h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (pin_h, pin_w), effective, wasted
    return best


def _token_count(height: int, width: int, rows: int, cols: int, side: int = TILE // PATCH) -> int:
    """Image tokens for a ``rows`` x ``cols`` tiling: base view + unpadded (pooled) tile features + newlines."""
    cur_h, cur_w = side * rows, side * cols
    if width / height > cur_w / cur_h:
        cur_h -= (cur_h - int(round(height * (cur_w / width), 7))) // 2 * 2
    else:
        cur_w -= (cur_w - int(round(width * (cur_h / height), 7))) // 2 * 2
    features, newlines = cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (MAX_TILES * side**2))
    if ratio > 1.1:
        features, newlines = int(cur_h // ratio) * int(cur_w // ratio), int(cur_h // ratio)
    return features + newlines + side * side


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Tile grid and best-fit canvas from the processor's ``image_sizes`` and the config's pinpoints
    (the same rule vLLM's model applies to these fields); the base view is the thumbnail."""
    sizes, pixels = fields.get("image_sizes"), fields.get("pixel_values")
    if sizes is None or pixels is None:  # precomputed embeddings
        return None
    height, width = (int(v) for v in sizes.reshape(-1).tolist())
    tile = hf_config.vision_config.image_size
    best_h, best_w = _best_resolution(height, width, hf_config.image_grid_pinpoints)
    rows, cols = best_h // tile, best_w // tile
    # pixel_values: base view + rows*cols tiles (more rows only as batch padding beside a larger image)
    if pixels.shape[0] < 1 + rows * cols or tuple(pixels.shape[-2:]) != (tile, tile):
        return None
    return ItemGeometry((width, height), (best_w, best_h), (rows, cols), True)


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """A video's frames: each sampled frame is resized to one tile and its patch grid pooled 2x2 (rounding up:
    27x27 -> 14x14 = 196 tokens), one group per frame; one newline token ends the video (in the last group)."""
    frames = int(fields["pixel_values_videos"].shape[0])
    tile = hf_config.vision_config.image_size
    side = math.ceil(tile // hf_config.vision_config.patch_size / 2)
    per_frame = side * side
    return ItemGeometry(image.size if image else None, (tile, tile), (side, side), None,
                        groups=(per_frame,) * (frames - 1) + (per_frame + 1,))


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling the real pinpoints give this image, if it gives exactly ``count`` tokens."""
    width, height = image.size
    best_h, best_w = _best_resolution(height, width, PINPOINTS)
    rows, cols = best_h // TILE, best_w // TILE
    if _token_count(height, width, rows, cols) != count:
        return None
    return ItemGeometry(image.size, (best_w, best_h), (rows, cols), True)


_SOURCE = ("transformers 5.19 LlavaOnevisionProcessor on the real values (num_image_tokens 729, "
           "vision_feature_select_strategy full, anyres_max_9, the 36 pinpoints; vLLM 0.32 renders the same): ")

ADAPTER = Adapter(
    name="llava_onevision",
    title="LLaVA-OneVision",
    model_types=("llava_onevision",),
    feature_tokens={"image": "<image>"},
    placeholders={"image": "<image>"},
    controls=(),
    geometry={"image": geometry, "video": video_geometry},
    geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 2929, _SOURCE + "2x2 tiles (768x768), unpadded to 40x54 + 40 newlines + 729 base"),
        KnownCount((320, 320), 1485, _SOURCE + "1x1 tile (384x384), 27x27 + 27 newlines + 729 base"),
        KnownCount((1920, 1080), 7269, _SOURCE + "3x5 tiles (1920x1152), 81x135 unpadded to 75x135, pooled "
                   "(anyres_max_9) to 60x108 + 60 newlines + 729 base"),
    )},
)
