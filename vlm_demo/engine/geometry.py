"""Per-family image geometry, read from the engine's own processor output (never recomputed
beside it): processed size, tile / partition / token grid, thumbnail. One small function a family."""

from __future__ import annotations

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
