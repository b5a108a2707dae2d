"""GLM-OCR (``zai-org/GLM-OCR``, MIT): a CogViT encoder, 14-px patches merged 2x2 -> one token per 28x28 px.

vLLM 0.32 serves it as ``GlmOcrForConditionalGeneration`` (``model_executor/models/glm_ocr.py``) with GLM-4.1V's
processing (``glm4_1v.py``: ``Glm4vProcessingInfo``, ``Glm4vMultiModalProcessor``). The image is resized by GLM's
``smart_resize`` (transformers 5.19 ``glm46v/image_processing_glm46v.py``, the checkpoint's ``Glm46VImageProcessor``):
each side a multiple of 28, and the area of *two* temporal frames (an image is one frame repeated to the temporal
patch of 2) within the processor's ``size``: ``shortest_edge`` <= 2 x h x w <= ``longest_edge`` (both are pixel
counts despite their names), so the checkpoint's ``longest_edge`` 9,633,792 allows one image 4,816,896 px: 6,144
tokens. ``<|begin_of_image|><|image|><|end_of_image|>`` expands to one ``<|image|>`` per 28x28 cell.

Per request, vLLM honours the processor's ``size`` (``mm_processor_kwargs={"size": {"shortest_edge": ...,
"longest_edge": ...}}``): the HF processor resizes with it and vLLM counts the placeholders from the processor's own
``image_grid_thw`` (``Glm4vMultiModalProcessor._get_prompt_updates``), so ids and pixels agree. Flat ``min_pixels`` /
``max_pixels`` are not GLM processor kwargs in transformers 5.19 (``Glm46VImageProcessorKwargs`` has none) and vLLM
reads ``max_pixels`` only from the engine's start-up kwargs to size its encoder budget (``_get_image_max_pixels``):
so the controls are the ``size`` keys themselves, sent as the whole dict.

Where the values come from:
- preprocessor_config.json (revision 2e85a628, quoted verbatim in a Go test of a GitHub project, and the same values
  in vLLM-GLM-OCR mocks of other projects): ``size {"shortest_edge": 12544, "longest_edge": 9633792}``, patch 14,
  temporal patch 2, merge 2, CLIP mean/std, ``Glm46VImageProcessor`` / ``Glm46VProcessor``; grids measured with that
  file by the same project (6000x4000 -> 128x192 patches = 6,144 tokens, 4000x3000 -> 134x180, 3000x3000 ->
  156x156, 5000x4000 -> 140x174, 1700x2200 -> 158x122, 100x100 -> 8x8) are what ``resized`` gives.
- the tasks: the GLM-OCR SDK's ``glmocr/config.yaml`` (``task_prompt_mapping``), which also sets ``pdf_dpi: 200``
  (pypdfium2); the card and the vLLM recipe (vllm-project/recipes ``models/zai-org/GLM-OCR.yaml``) send the image
  first, then ``Text Recognition:``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, Control, ItemGeometry, KnownCount, Task
from .qwen_grid import geometry

PATCH, MERGE, TEMPORAL = 14, 2, 2
FACTOR = PATCH * MERGE  # 28 px per token cell
#: The checkpoint's preprocessor_config.json ``size``: bounds on 2 x h x w (two temporal frames of one image).
SHORTEST_EDGE, LONGEST_EDGE = 12544, 9633792
#: One token's worth of ``size``: a 28x28 cell over the 2 temporal frames.
TOKEN_PIXELS = TEMPORAL * FACTOR * FACTOR
SDK = "zai-org/GLM-OCR glmocr/config.yaml (page_loader.task_prompt_mapping)"


def resized(width: int, height: int, shortest_edge: int = SHORTEST_EDGE,
            longest_edge: int = LONGEST_EDGE) -> tuple[int, int]:
    """GLM's ``smart_resize`` for one image (``num_frames`` = temporal patch 2): width and height, multiples of 28."""
    if height < FACTOR or width < FACTOR:
        scale = max(FACTOR / height, FACTOR / width)
        height, width = int(height * scale), int(width * scale)
    h_bar, w_bar = round(height / FACTOR) * FACTOR, round(width / FACTOR) * FACTOR
    if TEMPORAL * h_bar * w_bar > longest_edge:
        beta = math.sqrt(TEMPORAL * height * width / longest_edge)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif TEMPORAL * h_bar * w_bar < shortest_edge:
        beta = math.sqrt(shortest_edge / (TEMPORAL * height * width))
        h_bar, w_bar = math.ceil(height * beta / FACTOR) * FACTOR, math.ceil(width * beta / FACTOR) * FACTOR
    return w_bar, h_bar


def count(width: int, height: int, shortest_edge: int = SHORTEST_EDGE, longest_edge: int = LONGEST_EDGE) -> int:
    """Image tokens for an image of this size: one per 28x28 cell of ``resized``."""
    w, h = resized(width, height, shortest_edge, longest_edge)
    return (w // FACTOR) * (h // FACTOR)


def size_of(mm_kwargs: Mapping[str, Any]) -> tuple[int, int]:
    """The ``size`` bounds a request's kwargs give (the images' own scope wins), the checkpoint's for what they
    leave out."""
    kwargs = {**mm_kwargs, **(mm_kwargs.get("images_kwargs") or {})}
    size = {"shortest_edge": SHORTEST_EDGE, "longest_edge": LONGEST_EDGE, **(kwargs.get("size") or {})}
    return int(size["shortest_edge"]), int(size["longest_edge"])


def geometry_from_count(n: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The resize rule with the request's ``size``; shown only when it gives the server's count."""
    w, h = resized(*image.size, *size_of(mm_kwargs))
    if (w // FACTOR) * (h // FACTOR) != n:
        return None
    return ItemGeometry(image.size, (w, h), (h // FACTOR, w // FACTOR), None)


ADAPTER = Adapter(
    name="glm_ocr", title="GLM-OCR", model_types=("glm_ocr",), feature_tokens={"image": "<|image|>"},
    placeholders={"image": "<|begin_of_image|><|image|><|end_of_image|>"},
    controls=(Control("size.shortest_edge", label="size.shortest_edge (px of 2 frames; 1568 per 28x28 token)",
                      min=TOKEN_PIXELS, max=LONGEST_EDGE // 2, step=TOKEN_PIXELS, default=SHORTEST_EDGE),
              Control("size.longest_edge", label="size.longest_edge (px of 2 frames; 1568 per 28x28 token)",
                      min=TOKEN_PIXELS, max=LONGEST_EDGE, step=TOKEN_PIXELS, sizes_cache=True, default=LONGEST_EDGE)),
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count},
    known_counts={"image": (
        KnownCount((640, 480), 391, "GLM smart_resize(480, 640): 476x644 -> 17x23 cells of 28 px (2x476x644 is "
                   "within the checkpoint's size 12544..9633792)"),
        KnownCount((1653, 2339), 4956, "an A4 page at 200 dpi (the SDK's pdf_dpi; pypdfium2 renders 595x842 pt as "
                   "1653x2339): 2352x1652 -> 84x59 cells"),
        KnownCount((1920, 1080), 2691, "16:9: 1092x1932 -> 39x69 cells"),
        KnownCount((1920, 1080), 594, "size.longest_edge 1003520 (640 tokens x 1568): 2 x h x w over it, so scaled "
                   "down by sqrt(2x1920x1080/1003520) -> 504x924 -> 18x33 cells",
                   {"size.longest_edge": 1003520}),
    )},
    tasks=(Task("Text", "Text Recognition:", SDK),
           Task("Table", "Table Recognition:", SDK),
           Task("Formula", "Formula Recognition:", SDK)),
    document_dpi=200,
)
