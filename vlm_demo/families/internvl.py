"""InternVL2.5 (``OpenGVLab/InternVL2_5-1B-MPO``, remote-code ``internvl_chat``): 448 px tiles, 256 tokens each.

The image is cut into the grid of 448-px tiles whose aspect ratio is closest to the image's (between
min_dynamic_patch and max_dynamic_patch tiles), plus a 448-px thumbnail when there is more than one tile;
``<image>`` expands to ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``.

vLLM builds the image processor itself from config.json (tile size, min/max tiles, thumbnail). The chat
template takes message content as a plain string, so vLLM puts an ``<image>`` placeholder in the text, which
its InternVL processor expands to ``<img><IMG_CONTEXT>*256*tiles</img>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PIL import Image

from . import box_formats
from .base import Adapter, Control, ItemGeometry, KnownCount
from .internvl_tiling import chat_grids, closest_grid

TILE, TOKENS_PER_TILE = 448, 256
"""The checkpoint's tile side (config.json ``force_image_size``) and tokens per tile (14-px patches, pixel
shuffle 0.5)."""
MIN_TILES, MAX_TILES = 1, 12
"""The checkpoint's config.json ``min_dynamic_patch`` and ``max_dynamic_patch``."""


def _tiling(image: Image.Image, mm_kwargs: Mapping[str, Any], min_default: int, max_default: int,
            tile: int) -> ItemGeometry:
    grids = chat_grids(mm_kwargs.get("min_dynamic_patch", min_default),
                       mm_kwargs.get("max_dynamic_patch", max_default))
    cols, rows = closest_grid(*image.size, grids, tile)
    return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), cols * rows != 1)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tile grid, checked against the engine's own patch count (``image_num_patches``)."""
    if image is None or not hf_config.dynamic_image_size:
        return None
    tile = hf_config.force_image_size or hf_config.vision_config.image_size
    found = _tiling(image, mm_kwargs, hf_config.min_dynamic_patch, hf_config.max_dynamic_patch, tile)
    rows, cols = found.grid or (0, 0)
    thumbnail = bool(hf_config.use_thumbnail and rows * cols != 1)
    if rows * cols + thumbnail != int(fields["image_num_patches"]):
        return None  # the engine's own count wins; never show a guess
    return ItemGeometry(found.orig_size, found.processed_size, found.grid, thumbnail)


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """A video's frames: each sampled frame is one tile (resized to it, no tiling, no thumbnail), one group
    of ``num_image_token`` tokens in a square grid (pixel shuffle 0.5 of the 14-px patches)."""
    tile = hf_config.force_image_size or hf_config.vision_config.image_size
    side = round(tile // hf_config.vision_config.patch_size * hf_config.downsample_ratio)
    return ItemGeometry(image.size if image else None, (tile, tile), (side, side), None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule with the checkpoint's defaults (1-12 tiles, thumbnail), if it gives ``count``."""
    found = _tiling(image, mm_kwargs, MIN_TILES, MAX_TILES, TILE)
    rows, cols = found.grid or (0, 0)
    return found if (rows * cols + found.thumbnail) * TOKENS_PER_TILE == count else None


ADAPTER = Adapter(
    name="internvl", title="InternVL2.5", model_types=("internvl_chat",), feature_tokens={"image": "<IMG_CONTEXT>"},
    placeholders={"image": "<image>"}, markers={"image": ("<img>", "</img>")},
    controls=(Control("min_dynamic_patch", label="min_dynamic_patch (448 px tiles)", min=1, max=40, default=1),
              Control("max_dynamic_patch", label="max_dynamic_patch (448 px tiles)", min=1, max=40, sizes_cache=True, default=12)),
    grounding=box_formats.INTERNVL, geometry={"image": geometry, "video": video_geometry},
    geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 3328, "4:3 -> 4x3 tiles of 448 px + thumbnail = 13 x 256 "
                   "(config.json: force_image_size 448, downsample_ratio 0.5, max_dynamic_patch 12)"),
        KnownCount((640, 480), 1792, "max_dynamic_patch 6: 3x2 tiles + thumbnail = 7 x 256",
                   {"max_dynamic_patch": 6}),
    )},
)
