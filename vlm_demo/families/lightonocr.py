"""LightOnOCR (``lightonai/LightOnOCR-2-1B``, its bbox variant ``-2-1B-bbox``, and ``LightOnOCR-1B-1025``;
Apache-2.0): a Pixtral encoder, 14-px patches merged 2x2 -> one ``<|image_pad|>`` per 28x28 px cell, fixed geometry.

vLLM 0.32 serves it as ``LightOnOCRForConditionalGeneration`` (``model_executor/models/lightonocr.py``, on the
Mistral 3 / Pixtral path; the checkpoints' config.json says ``model_type: mistral3``, so this family is found by its
architecture, and a Mistral 3 model stays generic). The image keeps its aspect ratio and is scaled down (never up) to
a longest edge of ``vision_config.image_size`` = 1540 px, each side then rounded *up* to a multiple of 28; the
template's one ``<|image_pad|>`` becomes one ``<|image_pad|>`` per cell, with no row-break or end tokens (vLLM:
"break/end tokens are not used in LightOnOCR", though the processor config names ``<|vision_pad|>`` and
``<|vision_end|>``). A page costs at most 55 x 55 = 3,025 tokens.

No per-request resolution control: vLLM's LightOnOCR counts the placeholders from ``vision_config.image_size``
itself (``LightOnOCRProcessingInfo.get_vision_encoder_info``, which drops Mistral 3's override by the processor's
``size``), while a request's ``size.longest_edge`` would still resize the pixels: ids and embeddings would disagree.
So the geometry is fixed, and the page says so by the grid it draws.

Where the values come from: the checkpoint files of ``LightOnOCR-1B-1025`` as copied whole into a GitHub project
(config.json: ``mistral3``, image_token_id 151655, spatial_merge_size 2, vision ``pixtral`` image_size 1540, patch
14; preprocessor_config.json: ``PixtralImageProcessorFast``, size ``{"longest_edge": 1540}``, patch 14, bicubic,
CLIP mean/std; processor_config.json: image ``<|image_pad|>``, break ``<|vision_pad|>``, end ``<|vision_end|>``);
LightOnOCR-2-1B's own files were not found in the indexed copies: its card names the same 1540-px longest dimension,
its tags ``mistral3``. The prompt: the cards send the page alone, no text (the bbox variant's hosting notes: "Do not
include a system prompt or user prompt as the model has a tendency to repeat the prompt"); the cards render PDFs with
pypdfium2 at ``scale=2.77`` ("Render at 200 DPI").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from . import box_formats
from .base import Adapter, ItemGeometry, KnownCount, Task

LONGEST_EDGE, PATCH, MERGE = 1540, 14, 2
CELL = PATCH * MERGE  # 28 px per token
CARD = "lightonai/LightOnOCR-1B-1025 and LightOnOCR-2-1B model cards (PDF inference: the page image, no text)"


def resized(width: int, height: int) -> tuple[int, int]:
    """Pixtral's resize as vLLM counts it (``PixtralHFEncoderInfo.get_patch_grid_size``): scaled down to fit 1540 px,
    then each side rounded up to a multiple of 28."""
    ratio = max(width / LONGEST_EDGE, height / LONGEST_EDGE)
    if ratio > 1:
        width, height = int(math.floor(width / ratio)), int(math.floor(height / ratio))
    return (width - 1) // CELL * CELL + CELL, (height - 1) // CELL * CELL + CELL


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The resized picture (the processor's pixels, un-padded per image by vLLM) and its grid of 28-px cells."""
    h, w = (int(v) for v in fields["pixel_values"].shape[-2:])
    cell = hf_config.vision_config.patch_size * hf_config.spatial_merge_size
    return ItemGeometry(image.size if image else None, (w, h), (h // cell, w // cell), None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The fixed rule; shown only when it gives the server's count."""
    w, h = resized(*image.size)
    if (w // CELL) * (h // CELL) != count:
        return None
    return ItemGeometry(image.size, (w, h), (h // CELL, w // CELL), None)


ADAPTER = Adapter(
    name="lightonocr", title="LightOnOCR", architectures=("LightOnOCRForConditionalGeneration",),
    feature_tokens={"image": "<|image_pad|>"}, placeholders={"image": "<|image_pad|>"},
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 414, "not scaled (under 1540 px): 480x640 rounded up to 504x644 -> 18x23 cells"),
        KnownCount((1653, 2339), 2145, "an A4 page at 200 dpi (the cards' scale 2.77; pypdfium2 renders 595x842 pt "
                   "as 1653x2339): scaled by 1540/2339 to 1088x1540 -> 1092x1540 -> 55x39 cells"),
        KnownCount((1920, 1080), 1705, "16:9: scaled to 1540x866 -> 1540x868 -> 31x55 cells"),
    )},
    tasks=(Task("Convert to Markdown", "", CARD),),
    document_dpi=200,
    grounding=box_formats.LIGHTONOCR_BBOX,  # (the bbox variants'; the others write no boxes)
)
