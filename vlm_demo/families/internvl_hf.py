"""HF-format InternVL (``OpenGVLab/InternVL3_5-1B-HF``, ``internvl``): 448 px tiles, 256 tokens each.

With ``crop_to_patches`` (on by default) the image is cut into the grid of 448-px tiles (min_patches to
max_patches of them) closest to its aspect ratio, plus a 448-px thumbnail when there is more than one tile;
``<IMG_CONTEXT>`` expands to ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``.

vLLM 0.32 runs the checkpoint as ``InternS1ForConditionalGeneration`` (``models/interns1.py``) with
transformers' ``InternVLProcessor`` (``GotOcr2ImageProcessor``: the tiling, and ``InternVLProcessor``'s
default ``crop_to_patches=True``, which wins over the checkpoint's ``preprocessor_config.json`` value
``false``). vLLM sizes its encoder cache from that config value (256 tokens an image) unless the engine
starts with ``crop_to_patches=True``, hence the control sizes the cache. The tokenizer is Qwen3's plus
InternVL's tokens and ``<video>``; the processor reads the named ones (``start_image_token`` ...) from
``extra_special_tokens`` in tokenizer_config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PIL import Image

from . import box_formats
from .base import Adapter, Control, ItemGeometry, KnownCount
from .internvl_tiling import closest_grid, hf_grids

#: preprocessor_config.json of the checkpoint: 448-px tiles, 1-12 of them; 256 tokens a tile.
TILE, TOKENS_PER_TILE, MIN_PATCHES, MAX_PATCHES = 448, 256, 1, 12


def tiling(image: Image.Image, mm_kwargs: Mapping[str, Any], tile: int = TILE) -> ItemGeometry:
    """What the processor does with ``image`` under the request's kwargs and the checkpoint's defaults."""
    if not mm_kwargs.get("crop_to_patches", True):
        return ItemGeometry(image.size, (tile, tile), (1, 1), False)
    grids = hf_grids(mm_kwargs.get("min_patches", MIN_PATCHES), mm_kwargs.get("max_patches", MAX_PATCHES))
    cols, rows = closest_grid(*image.size, grids, tile)
    return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), cols * rows != 1)


def _patches(found: ItemGeometry) -> int:
    rows, cols = found.grid or (0, 0)
    return rows * cols + bool(found.thumbnail)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tile grid, checked against the engine's own patch count (``image_num_patches``)."""
    if image is None:
        return None
    num_patches = int(fields["image_num_patches"])
    found = tiling(image, mm_kwargs, int(fields["pixel_values"].shape[-1]))
    if _patches(found) != num_patches:  # the engine's own count wins: only the thumbnail is certain
        return ItemGeometry(image.size, None, None, num_patches > 1)
    return found


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """A video's frames: each sampled frame is one tile (resized to it, no thumbnail), one group of tokens
    in a square grid (pixel shuffle 0.5 of the patches)."""
    tile = int(fields["pixel_values_videos"].shape[-1])
    patch = hf_config.vision_config.patch_size
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    side = round(tile // patch * hf_config.downsample_ratio)
    return ItemGeometry(image.size if image else None, (tile, tile), (side, side), None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule with the request's kwargs, if it gives the server's ``count``."""
    found = tiling(image, mm_kwargs)
    return found if _patches(found) * TOKENS_PER_TILE == count else None


ADAPTER = Adapter(
    name="internvl_hf", title="InternVL (HF format)", model_types=("internvl",),
    feature_tokens={"image": "<IMG_CONTEXT>"}, placeholders={"image": "<IMG_CONTEXT>"},
    markers={"image": ("<img>", "</img>")},
    controls=(Control("min_patches", label="min_patches (448 px tiles)", min=1, max=MAX_PATCHES, default=1),
              Control("max_patches", label="max_patches (448 px tiles)", min=1, max=MAX_PATCHES, sizes_cache=True, default=12),
              Control("crop_to_patches", label="crop_to_patches (tiles + thumbnail)", kind="bool", sizes_cache=True, default=True)),
    grounding=box_formats.INTERNVL, geometry={"image": geometry, "video": video_geometry},
    geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 3328, "4:3 -> 4x3 tiles of 448 px + thumbnail = 13 x 256 (GotOcr2 tiling with "
                   "InternVLProcessor's crop_to_patches=True; preprocessor_config.json: size 448, "
                   "min_patches 1, max_patches 12; processor_config.json: image_seq_length 256)"),
        KnownCount((320, 320), 256, "1:1 -> 1x1 tile, no thumbnail = 1 x 256"),
        KnownCount((640, 480), 1792, "max_patches 6: 3x2 tiles + thumbnail = 7 x 256", {"max_patches": 6}),
        KnownCount((640, 480), 256, "crop_to_patches false: one 448-px resize = 1 x 256",
                   {"crop_to_patches": False}),
    )},
)
