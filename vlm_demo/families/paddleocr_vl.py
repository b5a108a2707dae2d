"""PaddleOCR-VL (``PaddlePaddle/PaddleOCR-VL``, vLLM 0.32's ``PaddleOCRVLForConditionalGeneration``): an element reader
(a NaViT-style SigLIP encoder and ERNIE-4.5-0.3B) that answers one task prompt per picture of a page element.

vLLM counts an image's tokens itself (``paddleocr_vl.py``, ``get_num_image_tokens``): the picture is resized by the
model's ``smart_resize`` (each side a multiple of 28 = 14-px patches x 2x2 merge, the area within [min_pixels,
max_pixels]) and gets one ``<|IMAGE_PLACEHOLDER|>`` per 28x28 px; ``<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>``
(the model class's ``get_placeholder_str``) expands to them. Its bounds come from the image processor's ``size``
under the keys of the processor in use: ``min_pixels`` / ``max_pixels`` with ``--trust-remote-code`` (the
checkpoint's own processor code), ``shortest_edge`` / ``longest_edge`` with transformers' ``PaddleOCRVLImageProcessor``;
a request's ``min_pixels`` / ``max_pixels`` override the bound under either key, and the processor of either path
takes them as call kwargs (transformers 5.19's as a deprecated alias of its ``size`` edges, with a FutureWarning).
So the controls go as the names the checkpoint's docs use, unaliased: a ``size`` dict would move the count only
without remote code. The checkpoint's bounds: min_pixels 147384, max_pixels 2822400 (its preprocessor config, as a
third-party OpenVINO port lists it beside resample 3, mean and std 0.5, patch 14, temporal patch 1, merge 2).
"""

from __future__ import annotations

from .base import Adapter, KnownCount, Task
from .qwen_grid import count_rule, geometry, pixel_controls

#: The checkpoint's preprocessor bounds on the resized area (transformers' own defaults differ: 384x384, 1536x1536).
MIN_PIXELS, MAX_PIXELS = 147384, 2822400
FACTOR = 28  # 14-px patches, 2x2 merged into one token

_SOURCE = ("vllm-project/recipes models/PaddlePaddle/PaddleOCR-VL.yaml (client TASKS) and transformers' "
           "docs/source/en/model_doc/paddleocr_vl.md (the four element-level prompts)")

TASKS = (
    Task("OCR", "OCR:", _SOURCE),
    Task("Table", "Table Recognition:", _SOURCE),
    Task("Formula", "Formula Recognition:", _SOURCE),
    Task("Chart", "Chart Recognition:", _SOURCE),
)

ADAPTER = Adapter(
    name="paddleocr_vl", title="PaddleOCR-VL", model_types=("paddleocr_vl",),
    feature_tokens={"image": "<|IMAGE_PLACEHOLDER|>"},
    placeholders={"image": "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"},
    # (max_pixels no lower than min_pixels: PaddleOCR-VL's smart_resize, unlike Qwen's, floors a side to 0 cells under
    # a small bound, and vLLM then finds no placeholders; at min_pixels every aspect ratio up to 188:1 keeps a cell)
    controls=pixel_controls(FACTOR, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS), max_low=MIN_PIXELS),
    geometry={"image": geometry},
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells (min_pixels 147384, "
                   "max_pixels 2822400 bind neither)"),
        KnownCount((1654, 2339), 3550, "an A4 page at 200 dpi: over the checkpoint's max_pixels 2822400 (given "
                   "here, as the tiny entry sends less), scaled to 1400x1988 -> 50x71 cells",
                   {"max_pixels": MAX_PIXELS}),
        KnownCount((100, 80), 208, "a 100x80 crop: under min_pixels 147384, scaled up to 448x364 -> 16x13 cells"),
        KnownCount((1654, 2339), 1260, "the A4 page at max_pixels 1003520: 840x1176 -> 30x42 cells",
                   {"max_pixels": 1003520}),
    )},
    tasks=TASKS,
)
