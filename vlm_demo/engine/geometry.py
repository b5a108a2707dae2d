"""Per-family image geometry, read from the engine's own processor output (never recomputed
beside it): processed size, tile / partition / token grid, thumbnail. One small function a family."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from PIL import Image

from .types import ImageGeometry


def _field(item: Any, key: str) -> Any:
    """The tensor of one processor-output field of one image (a ``MultiModalKwargsItem``)."""
    return item[key].data


def _llava(item: Any, image: Image.Image, hf_config: Any, mm_kwargs: dict[str, Any]) -> ImageGeometry:
    h, w = _field(item, "pixel_values").shape[-2:]
    return ImageGeometry(image.size, (int(w), int(h)), None, None)


def _qwen2_5_vl(item: Any, image: Image.Image, hf_config: Any, mm_kwargs: dict[str, Any]) -> ImageGeometry:
    _, h, w = (int(v) for v in _field(item, "image_grid_thw").tolist())  # in 14-px patches
    patch, merge = hf_config.vision_config.patch_size, hf_config.vision_config.spatial_merge_size
    return ImageGeometry(image.size if image else None, (w * patch, h * patch), (h // merge, w // merge), None)


def _internvl(item: Any, image: Image.Image, hf_config: Any, mm_kwargs: dict[str, Any]) -> ImageGeometry:
    from vllm.transformers_utils.processors.internvl import (
        calculate_internvl_targets,
        get_internvl_target_ratios,
        resolve_internvl_min_max_num,
    )

    num_patches = int(_field(item, "image_num_patches"))
    size = hf_config.force_image_size or hf_config.vision_config.image_size
    min_num, max_num = resolve_internvl_min_max_num(
        min_dynamic_patch=mm_kwargs.get("min_dynamic_patch", hf_config.min_dynamic_patch),
        max_dynamic_patch=mm_kwargs.get("max_dynamic_patch", hf_config.max_dynamic_patch),
        dynamic_image_size=hf_config.dynamic_image_size, use_thumbnail=False,
    )
    blocks, width, height = calculate_internvl_targets(
        orig_width=image.width, orig_height=image.height, image_size=size,
        target_ratios=get_internvl_target_ratios(min_num, max_num), use_thumbnail=False,
    )
    thumbnail = bool(hf_config.use_thumbnail and blocks != 1)
    if blocks + thumbnail != num_patches:  # the engine's own count wins; never show a guess
        return ImageGeometry(image.size, None, None, None)
    return ImageGeometry(image.size, (width, height), (height // size, width // size), thumbnail)


def _ovis(item: Any, image: Image.Image, hf_config: Any, mm_kwargs: dict[str, Any]) -> ImageGeometry:
    rows, cols = (int(v) for v in _field(item, "grids").reshape(-1)[-2:].tolist())
    # Each partition is resized on its own (long side <= 448), so there is no one processed size.
    return ImageGeometry(image.size, None, (rows, cols), rows * cols > 1)


GEOMETRY: dict[str, Callable[[Any, Image.Image, Any, dict[str, Any]], ImageGeometry]] = {
    "llava": _llava,
    "qwen2_5_vl": _qwen2_5_vl,
    "internvl": _internvl,
    "ovis": _ovis,
}


def image_geometry(family: str, item: Any, image: Image.Image | None, hf_config: Any,
                   mm_kwargs: dict[str, Any]) -> ImageGeometry:
    """Geometry of one image from its processor output (``item``); ``image`` is None for embeddings."""
    try:
        return GEOMETRY[family](item, image, hf_config, mm_kwargs)
    except (KeyError, AttributeError, ValueError, TypeError):  # a field this input does not produce
        return ImageGeometry(image.size if image else None, None, None, None)


# A remote server returns ids and ranges, not the processor's output: there the geometry is computed
# from the image size and the request's kwargs with the family's resize rule, and shown only when it
# gives exactly the image-token count the server produced (never a guess).

def _qwen2_5_vl_from_count(count: int, image: Image.Image, mm_kwargs: dict[str, Any]) -> ImageGeometry | None:
    factor = 28  # 14-px patches, 2x2 merged into one token
    w, h = image.size
    min_pixels, max_pixels = mm_kwargs.get("min_pixels", 56 * 56), mm_kwargs.get("max_pixels", 12845056)
    h_bar, w_bar = round(h / factor) * factor, round(w / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar = max(factor, math.floor(h / beta / factor) * factor)
        w_bar = max(factor, math.floor(w / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar, w_bar = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    if (h_bar // factor) * (w_bar // factor) != count:
        return None
    return ImageGeometry(image.size, (w_bar, h_bar), (h_bar // factor, w_bar // factor), None)


def _llava_from_count(count: int, image: Image.Image, mm_kwargs: dict[str, Any]) -> ImageGeometry | None:
    side = math.isqrt(count)  # one token per 14-px patch of the square input
    return ImageGeometry(image.size, (side * 14, side * 14), None, None) if side * side == count else None


def _internvl_from_count(count: int, image: Image.Image, mm_kwargs: dict[str, Any]) -> ImageGeometry | None:
    size, per_tile = 448, 256  # InternVL2.5: 448-px tiles, 256 tokens each, thumbnail when tiled
    min_num, max_num = mm_kwargs.get("min_dynamic_patch", 1), mm_kwargs.get("max_dynamic_patch", 12)
    ratios = sorted({(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                     if min_num <= i * j <= max_num}, key=lambda r: r[0] * r[1])
    w, h = image.size
    best, best_diff = (1, 1), float("inf")
    for cols, rows in ratios:  # InternVL's find_closest_aspect_ratio
        diff = abs(w / h - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and w * h > 0.5 * size * size * cols * rows:
            best = (cols, rows)
    blocks = best[0] * best[1]
    thumbnail = blocks != 1
    if (blocks + thumbnail) * per_tile != count:
        return None
    return ImageGeometry(image.size, (best[0] * size, best[1] * size), (best[1], best[0]), thumbnail)


def _ovis_from_count(count: int, image: Image.Image, mm_kwargs: dict[str, Any]) -> ImageGeometry | None:
    side, segment = 448, 255  # Ovis2: 448-px partitions; (448 / 14 / 2)^2 - 1 pad tokens per visual atom
    max_partition, threshold = mm_kwargs.get("max_partition", 9), mm_kwargs.get("covering_threshold", 0.9)
    w, h = image.size

    def cells(rows: int, cols: int) -> list[tuple[int, int]]:  # width, height of each partition
        return [((w if c == cols - 1 else (c + 1) * (w // cols)) - c * (w // cols),
                 (h if r == rows - 1 else (r + 1) * (h // rows)) - r * (h // rows))
                for r in range(rows) for c in range(cols)]

    def covered(cw: int, ch: int) -> float:  # area of one partition kept after resizing to ``side``
        long, short = max(cw, ch), min(cw, ch)
        return side * (short / long * side) if long > side else long * short

    grids = [((rows, cols), sum(covered(*cell) for cell in cells(rows, cols)) / (w * h))
             for rows in range(1, max_partition + 1) for cols in range(1, max_partition + 1)
             if rows * cols <= max_partition]
    good = [g for g in grids if g[1] > threshold]  # Ovis's rule: fewest partitions covering enough, else most
    (rows, cols), _ = (sorted(good, key=lambda g: (g[0][0] * g[0][1], -g[1])) if good
                       else sorted(grids, key=lambda g: (-g[1], g[0][0] * g[0][1])))[0]
    n = rows * cols  # pads: one per indicator token (start, prefix, separators, end) and ``segment`` per atom
    if (4 + segment if n == 1 else 3 + 2 * n + (1 + n) * segment) != count:
        return None
    return ImageGeometry(image.size, None, (rows, cols), n > 1)


GEOMETRY_FROM_COUNT: dict[str, Callable[[int, Image.Image, dict[str, Any]], ImageGeometry | None]] = {
    "llava": _llava_from_count,
    "qwen2_5_vl": _qwen2_5_vl_from_count,
    "internvl": _internvl_from_count,
    "ovis": _ovis_from_count,
}


def geometry_from_count(family: str, count: int, image: Image.Image | None,
                        mm_kwargs: dict[str, Any]) -> ImageGeometry:
    """Geometry of one image from its size, the kwargs and its image-token count (remote servers)."""
    rule = GEOMETRY_FROM_COUNT.get(family)
    found = rule(count, image, mm_kwargs) if rule and image is not None and count else None
    return found or ImageGeometry(image.size if image else None, None, None, None)
