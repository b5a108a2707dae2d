"""SmolVLM2 (``HuggingFaceTB/SmolVLM2-2.2B-Instruct``) and Idefics3: the long side to 1536, cut into 384-px tiles
of 81 tokens; ``<image>`` -> per tile ``<fake_token_around_image><row_i_col_j><image>*81``, then the global view.

In full: rows of tiles (each row ends with a newline), then
``\\n<fake_token_around_image><global-img><image>*81<fake_token_around_image>`` for the whole image squashed to
384x384; a one-tile canvas (or ``do_image_splitting=False``) gives only that last block. vLLM 0.32 runs
Idefics3 (``HuggingFaceM4/Idefics3-8B-Llama3``: 364-px tiles of 169 tokens) through the same processor and
rule, so both model types belong here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from .base import Adapter, Control, ItemGeometry, KnownCount

@dataclass(frozen=True)
class Tiling:
    """The image-processor settings and tokens per tile of one checkpoint."""

    longest_edge: int
    """``size.longest_edge``: the long side the image is resized to before tiling."""
    tile: int
    """``max_image_size.longest_edge``: the tile side (the vision encoder's input size)."""
    tokens: int
    """``image_seq_len``: ``<image>`` tokens per tile, ((tile / patch) / scale_factor)^2."""


#: SmolVLM2-2.2B (the checkpoint this adapter stands for), SmolVLM2-256M/500M, Idefics3-8B. A remote
#: server's count is matched against each; the token counts per tile exclude any coincidence.
TILINGS = (Tiling(1536, 384, 81), Tiling(2048, 512, 64), Tiling(1456, 364, 169))


def _resized(width: int, height: int, longest_edge: int) -> tuple[int, int]:
    """The processor's first resize: the long side to ``longest_edge`` (even short side), capped at 4096."""
    if width >= height:
        new_w, new_h = longest_edge, int(longest_edge / (width / height))
        new_h += new_h % 2
    else:
        new_w, new_h = int(longest_edge * (width / height)), longest_edge
        new_w += new_w % 2
    if max(new_w, new_h) > 4096:
        if new_w >= new_h:
            new_w, new_h = 4096, int(4096 / (new_w / new_h))
        else:
            new_w, new_h = int(4096 * (new_w / new_h)), 4096
    return max(new_w, 1), max(new_h, 1)


def tile_grid(width: int, height: int, longest_edge: int, tile: int) -> tuple[int, int] | None:
    """Rows and columns of tiles the processor cuts an image into; (0, 0) when it stays one tile.

    vLLM counts tokens with transformers' ``get_number_of_image_patches`` while the pixels are tiled by
    ``resize_for_vision_encoder``; the two agree when ``longest_edge`` is a multiple of ``tile`` (as in
    every checkpoint). None when they do not: vLLM then cuts the pixel tiles to its own count.
    """
    w, h = _resized(width, height, longest_edge)
    counted = (math.ceil(h / tile), math.ceil(w / tile))
    if w >= h:  # resize_for_vision_encoder: one side up to whole tiles, the other from the aspect ratio
        cols = math.ceil(w / tile)
        rows = math.ceil(int(cols * tile / (w / h)) / tile)
    else:
        rows = math.ceil(h / tile)
        cols = math.ceil(int(rows * tile * (w / h)) / tile)
    if (rows, cols) != counted:
        return None
    return (rows, cols) if rows > 1 or cols > 1 else (0, 0)


def _edge(value: Any, default: int) -> int:
    """``longest_edge`` of a size dict (a request kwarg or a config value), else ``default``."""
    if isinstance(value, Mapping) and "longest_edge" in value:
        return int(value["longest_edge"])
    return default


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Tiles from ``num_patches`` and the tile side from ``pixel_values``; the grid from the tiling rule,
    kept only when it gives the processor's tile count."""
    tiles = int(fields["num_patches"])
    tile = int(fields["pixel_values"].shape[-1])
    orig = image.size if image is not None else None
    if tiles == 1:  # one view: the pixel mask says how much of the tile it fills
        mask = fields["pixel_attention_mask"][0]
        return ItemGeometry(orig, (int(mask.any(0).sum()), int(mask.any(1).sum())), None, False)
    if image is None:
        return ItemGeometry(None, None, None, True)
    config_size = getattr(getattr(hf_config, "vision_config", None), "size", None)
    longest = _edge(mm_kwargs.get("size"), _edge(config_size, 4 * tile))
    grid = tile_grid(*image.size, longest, tile)
    if grid is None or grid[0] * grid[1] + 1 != tiles:
        return ItemGeometry(orig, None, None, True)
    return ItemGeometry(orig, (grid[1] * tile, grid[0] * tile), grid, True)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule for each known checkpoint's settings (a request's ``size`` / ``do_image_splitting``
    applied); shown only when one of them gives the server's count."""
    for preset in TILINGS:
        tile = preset.tile
        grid = (tile_grid(*image.size, _edge(mm_kwargs.get("size"), preset.longest_edge), tile)
                if mm_kwargs.get("do_image_splitting", True) else (0, 0))
        if grid is None or (grid[0] * grid[1] + 1) * preset.tokens != count:
            continue
        rows, cols = grid
        if rows:
            return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), True)
        return ItemGeometry(image.size, (tile, tile), None, False)  # one view, stretched to the tile
    return None


ADAPTER = Adapter(
    name="smolvlm", title="SmolVLM2 / Idefics3", model_types=("smolvlm", "idefics3"),
    feature_tokens={"image": "<image>"}, placeholders={"image": "<image>"},
    controls=(Control("do_image_splitting", label="do_image_splitting (384 px tiles + global view)", kind="bool", default=True),),
    ranges_from_ids=False,  # an image's range holds one <image> run per tile, with row tokens between
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 1053, "640x480 -> 1536x1152 (size.longest_edge 1536) -> 3x4 tiles of 384 "
                   "(max_image_size 384) + global = 13 x 81 (image_seq_len; 384/14=27 patches, pixel shuffle 3)"),
        KnownCount((320, 320), 1377, "320x320 -> 1536x1536 (upscaled) -> 4x4 tiles + global = 17 x 81"),
        KnownCount((640, 480), 81, "do_image_splitting=False: the image squashed to one 384x384 view = 81",
                   {"do_image_splitting": False}),
    )},
)
