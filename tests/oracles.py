"""Token counts the tests expect, from each family's own published rule, so an engine's count can be held against
them (InternVL's tile search is the family module's one, itself held against vLLM's and transformers' own functions
in test_families)."""

from __future__ import annotations

import math

from vlm_demo.families.internvl_tiling import chat_grids, closest_grid


def qwen_tokens(width: int, height: int, min_pixels: int, max_pixels: int) -> int:
    """Qwen2.5-VL's resize rule (round each side to 28 px, keep the area in bounds): 1 token per 28x28."""
    h, w = round(height / 28) * 28, round(width / 28) * 28
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / beta / 28) * 28, math.floor(width / beta / 28) * 28
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / 28) * 28, math.ceil(width * beta / 28) * 28
    return h * w // (28 * 28)


def internvl_tiles(width: int, height: int, min_num: int = 1, max_num: int = 12) -> int:
    """InternVL's dynamic_preprocess: the closest aspect-ratio grid of 448 px tiles (the family's one search),
    plus a thumbnail."""
    cols, rows = closest_grid(width, height, chat_grids(min_num, max_num), 448)
    tiles = cols * rows
    return tiles + (1 if tiles > 1 else 0)


def ovis_tokens(partitions: int) -> int:
    """Ovis2: 256 tokens + 1 indicator per view; a partitioned image adds a whole-image view and an end."""
    return 259 if partitions == 1 else 257 * (partitions + 1) + 1
