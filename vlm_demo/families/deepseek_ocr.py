"""DeepSeek-OCR (``deepseek-ai/DeepSeek-OCR``, vLLM 0.32 ``DeepseekOCRForCausalLM``): a fixed "Gundam" geometry, a
1024-px global view plus 2-6 crops of 640 px; no per-request controls.

Each ``<image>`` becomes one run of ``<image>`` tokens: the global view (the page padded to 1024x1024, 16x16 tokens
and a newline token per row: 272), a view separator (1), and where the page is larger than 640 px on a side the
crop tiles (the page resized to columns x rows tiles of 640 px, 10x10 tokens each, a newline token per row of the
tiled canvas: (rows*10) x (cols*10 + 1)). The grid is the one of 2-6 tiles whose aspect ratio is closest to the
page's (InternVL's search, ``internvl_tiling``): an A4 page is 2x3 tiles, 903 tokens; a 16:9 slide 2x1, 483; at
most 933 (6x1). vLLM's ``vllm/transformers_utils/processors/deepseek_ocr.py`` hard-codes this in module constants
(``BASE_SIZE = 1024``, ``IMAGE_SIZE = 640``, ``CROP_MODE = True``, ``MIN_CROPS = 2``, ``MAX_CROPS = 6``).

The checkpoint has no chat template: vLLM falls back to its own ``template_deepseek_ocr.jinja`` (chosen by the
``model_type`` its config class gives the checkpoint, ``deepseek_ocr``): the bos token, the system prompt, then
each message's text as it stands (no role markers, no generation prompt). The content format is ``string``, so
vLLM writes the image placeholder before the text with a newline: a chat request whose text is
``<|grounding|>Convert the document to markdown.`` renders as the documented
``<image>\\n<|grounding|>Convert the document to markdown.``; the app sends the task's text without ``<image>``.

**Why there are no resolution modes** (Tiny 512 / Small 640 / Base 1024 / Large 1280 / Gundam): in vLLM 0.32 the
placeholder count ignores every kwarg. ``DeepseekOCRProcessingInfo.get_hf_processor`` merges a request's (or the
server's ``--mm-processor-kwargs``) ``image_size`` / ``base_size`` / ``crop_mode`` into the HF processor, which then
makes pixels and its own token list at that size; but ``DeepseekOCRMultiModalProcessor._get_prompt_updates`` counts
each image's placeholders with ``DeepseekOCRProcessingInfo.get_num_image_tokens(..., cropping=CROP_MODE)``, which
reads the module constants ``IMAGE_SIZE``, ``BASE_SIZE`` (and ``CROP_MODE``), not the kwargs;
``get_image_size_with_most_features`` (the profiling image) and ``DeepseekOCRProcessor.__call__``'s ``crop_mode``
default (bound when the module is imported) read them too. Seen with vLLM 0.32 on the tiny model: every mode's
kwargs give pixels of the mode's size and Gundam's placeholders (273 for a 640x480 page, 903 for A4); a Tiny
request's encoder output, 8x9+1 = 73 embeddings for 273 placeholders, stops the engine core ("Attempted to assign
73 = 73 multimodal tokens to 273 placeholders", ``_merge_multimodal_embeddings``; every later request fails with
EngineDeadError), so the app must never send these kwargs (it offers no control, and refuses a kwarg it does not
offer). Setting the constants per engine does not work in this app either: the renderer (vLLM's frontend
processing) runs in the app's own process for every engine, so a module constant is process-wide and two modes
could not be served side by side; patched there to Tiny's, the placeholders become 73 while the HF processor,
without ``crop_mode=False`` sent along, still cuts 512-px crops (its default is bound at import). The vLLM change
that allows modes: ``get_num_image_tokens`` taking
``image_size``, ``base_size`` and ``cropping`` from the merged kwargs (``self.ctx.get_merged_mm_kwargs`` /
the HF processor's own ``image_size``, ``base_size``), ``_get_prompt_updates`` passing the HF processor's values
and the request's ``crop_mode``, and ``get_image_size_with_most_features`` sizing for the largest mode the server
allows (``deepseek_ocr2.py`` has the same three functions, with ``IMAGE_SIZE = 768``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from . import box_formats
from .base import Adapter, ItemGeometry, KnownCount, Task
from .internvl_tiling import chat_grids, closest_grid

BASE_SIZE, IMAGE_SIZE = 1024, 640
"""The global view's side and a crop tile's side (vLLM 0.32's module constants ``BASE_SIZE``, ``IMAGE_SIZE``)."""
MIN_CROPS, MAX_CROPS = 2, 6
"""Fewest and most crop tiles of a page larger than a tile (``MIN_CROPS``, ``MAX_CROPS``)."""
PATCH, DOWNSAMPLE = 16, 4
"""SAM's patch size and the encoder's downsampling: a view of N px gives (N / 16 / 4)^2 tokens."""

FIXED = (f"fixed in vLLM 0.32 (Gundam mode): a {BASE_SIZE} px global view + {MIN_CROPS}-{MAX_CROPS} crops of "
         f"{IMAGE_SIZE} px where the page is larger than {IMAGE_SIZE} px")
"""The family's geometry in words, where a family with controls shows its sliders."""

#: The documented prompts (``DeepSeek-OCR-master/DeepSeek-OCR-vllm/config.py`` and the README's "Prompts
#: examples"), without the ``<image>\n`` they start with: in a chat request vLLM puts the image placeholder there.
_SOURCE = "deepseek-ai/DeepSeek-OCR README 'Prompts examples' and DeepSeek-OCR-vllm/config.py"
TASKS = (
    Task("Convert to Markdown", "<|grounding|>Convert the document to markdown.", f"{_SOURCE} (document)"),
    Task("OCR", "<|grounding|>OCR this image.", f"{_SOURCE} (other image)"),
    Task("Free OCR", "Free OCR.", f"{_SOURCE} (without layouts)"),
    Task("Parse the figure", "Parse the figure.", f"{_SOURCE} (figures in document)"),
    Task("Describe", "Describe this image in detail.", f"{_SOURCE} (general)"),
    Task("Locate ...", "Locate <|ref|>{what}<|/ref|> in the image.", f"{_SOURCE} (rec: 'Locate <|ref|>xxxx<|/ref|>')"),
)

OCR_ARCHITECTURES = ("DeepseekOCRForCausalLM", "DeepseekOCR2ForCausalLM")
"""config.json ``architectures`` of DeepSeek-OCR and OCR-2, whose processor output ``view_geometry`` reads."""

DOCUMENT_DPI = 144
"""``run_dpsk_ocr_pdf.py``'s ``pdf_to_images_high_quality(pdf_path, dpi=144)``."""


def side_tokens(size: int) -> int:
    """Tokens along one side of a view of ``size`` px (``math.ceil((size // 16) / 4)``)."""
    return math.ceil((size // PATCH) / DOWNSAMPLE)


def tiles(width: int, height: int, tile: int = IMAGE_SIZE) -> tuple[int, int]:
    """(columns, rows) of the crop grid vLLM's ``count_tiles`` picks; (1, 1): no crops (the page fits a tile)."""
    if width <= tile and height <= tile:
        return 1, 1
    return closest_grid(width, height, chat_grids(MIN_CROPS, MAX_CROPS), tile)


def count(width: int, height: int, base: int = BASE_SIZE, tile: int = IMAGE_SIZE, newlines: bool = True) -> int:
    """``<image>`` tokens of one picture: ``DeepseekOCRProcessingInfo.get_num_image_tokens`` (``newlines``) or
    DeepSeek-OCR-2's rule (no newline tokens)."""
    cols, rows = tiles(width, height, tile)
    g, t = side_tokens(base), side_tokens(tile)
    total = g * (g + newlines) + 1
    if cols * rows > 1:
        total += (rows * t) * (cols * t + newlines)
    return total


def breaks(grid: tuple[int, int] | None) -> dict[str, int]:
    """The ``<image>`` positions that are no features: a newline after each row of the global view's 16 and of the
    crops' (10 a tile row), and the separator between the views (``count`` with ``newlines``)."""
    rows = grid[0] if grid else 0
    return {"row newline": side_tokens(BASE_SIZE) + rows * side_tokens(IMAGE_SIZE), "view separator": 1}


def view_geometry(fields: Mapping[str, Any], image: Image.Image | None) -> ItemGeometry | None:
    """The crop grid from the processor's ``images_spatial_crop`` ([columns, rows]) and the tiles' own size; the
    global view is the "thumbnail". None for embeddings."""
    if image is None or "images_spatial_crop" not in fields:
        return None
    cols, rows = (int(v) for v in fields["images_spatial_crop"].reshape(-1).tolist())
    base = int(fields["pixel_values"].shape[-1])
    if cols * rows <= 1:
        return ItemGeometry(image.size, (base, base), None, None)
    crops = fields.get("images_crop")
    if crops is None or crops.shape[0] != cols * rows:
        return None
    tile = int(crops.shape[-1])
    return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), True)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The crop grid drawn over the page (the global view as its thumbnail), for DeepSeek-OCR and OCR-2 alike (the
    tile size is read from the crops): both, and DeepSeek-VL2, have config.json's ``model_type: deepseek_vl_v2``, so a
    ``family: auto`` checkpoint of either OCR gets the first adapter; DeepSeek-VL2's tiles are another rule (None)."""
    if not set(getattr(hf_config, "architectures", None) or ()) & set(OCR_ARCHITECTURES):
        return None
    return view_geometry(fields, image)


def from_count(count_rule, base: int, tile: int):
    """A ``geometry_from_count`` rule: the fixed geometry, where it gives ``count``."""
    def rule(found: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
        if count_rule(*image.size) != found:
            return None
        cols, rows = tiles(*image.size, tile)
        if cols * rows == 1:
            return ItemGeometry(image.size, (base, base), None, None)
        return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), True)
    return rule


def known(size: tuple[int, int], what: str, count_rule=count) -> KnownCount:
    """A known count of the real checkpoint, with the arithmetic that gives it."""
    return KnownCount(size, count_rule(*size), f"vLLM 0.32 get_num_image_tokens (BASE_SIZE {BASE_SIZE}, IMAGE_SIZE "
                      f"{IMAGE_SIZE}, CROP_MODE True, 2-6 crops): {what}")


ADAPTER = Adapter(
    name="deepseek_ocr",
    title="DeepSeek-OCR",
    model_types=("deepseek_vl_v2",),
    architectures=("DeepseekOCRForCausalLM",),  # (DeepSeek-VL2 shares the model type)
    feature_tokens={"image": "<image>"},
    placeholders={"image": "<image>"},
    controls=(),
    geometry={"image": geometry},
    geometry_from_count={"image": from_count(count, BASE_SIZE, IMAGE_SIZE)},
    known_counts={"image": (
        known((640, 480), "a page within 640x640: no crops, 16x(16+1) + 1 = 273"),
        known((1191, 1684), "A4 portrait at 144 dpi: 2x3 tiles, 273 + (3x10)x(2x10+1) = 903"),
        known((1920, 1080), "16:9: 2x1 tiles, 273 + 10x(2x10+1) = 483"),
    )},
    tasks=TASKS,
    document_dpi=DOCUMENT_DPI,
    fixed_geometry=FIXED,
    grounding=box_formats.DEEPSEEK_OCR,
    breaks=breaks,
)
