"""DeepSeek-OCR-2 (``deepseek-ai/DeepSeek-OCR-2``, vLLM 0.32 ``DeepseekOCR2ForCausalLM``): a fixed geometry, a
1024-px global view plus 2-6 crops of 768 px; no per-request controls.

Each ``<image>`` becomes one run of ``<image>`` tokens: the global view (the page padded to 1024x1024, 16x16 = 256
tokens, no newline tokens), a view separator (1), and where the page is larger than 768 px on a side the crop
tiles (columns x rows tiles of 768 px, 12x12 = 144 tokens each): 257 + 144 x tiles, as the README's "(0-6)x144 + 256
visual tokens" (plus the separator). The grid is DeepSeek-OCR's search (2-6 tiles, the aspect ratio closest to the
page's): an A4 page is 2x3 tiles, 1121 tokens; a 16:9 slide 2x1, 545; at most 1121. vLLM hard-codes it:
``vllm/model_executor/models/deepseek_ocr2.py`` ``IMAGE_SIZE = 768`` beside the processor module's ``BASE_SIZE =
1024``, ``CROP_MODE = True``, ``MAX_CROPS = 6``, and the model reads the global view's size from config.json
(``vision_config.image_size``, 1024).

No chat template: vLLM's fallback ``template_deepseek_ocr.jinja`` (model type ``deepseek_ocr2``), as for
DeepSeek-OCR, so the image placeholder comes first with a newline and the task text after it. No resolution modes,
for DeepSeek-OCR's reason (``deepseek_ocr.py``): ``DeepseekOCR2ProcessingInfo.get_num_image_tokens``,
``get_image_size_with_most_features`` and ``DeepseekOCR2MultiModalProcessor._get_prompt_updates`` read the module
constants, not the request's kwargs (the upstream README offers this one mode anyway).
"""

from __future__ import annotations

from . import box_formats
from .base import Adapter, KnownCount, Task
from .deepseek_ocr import BASE_SIZE, DOCUMENT_DPI, count, from_count, geometry

IMAGE_SIZE = 768
"""A crop tile's side (``deepseek_ocr2.py``'s ``IMAGE_SIZE``)."""

FIXED = (f"fixed in vLLM 0.32: a {BASE_SIZE} px global view + 2-6 crops of {IMAGE_SIZE} px where the page is "
         f"larger than {IMAGE_SIZE} px")
"""The family's geometry in words, where a family with controls shows its sliders."""

_SOURCE = "deepseek-ai/DeepSeek-OCR-2 README 'Main Prompts' and DeepSeek-OCR2-vllm/config.py"
TASKS = (
    Task("Convert to Markdown", "<|grounding|>Convert the document to markdown.", f"{_SOURCE} (document)"),
    Task("Free OCR", "Free OCR.", f"{_SOURCE} (without layouts)"),
)
"""The README's two main prompts, without the ``<image>\\n`` they start with (vLLM puts the placeholder there)."""


def count2(width: int, height: int) -> int:
    """``<image>`` tokens of one picture: ``DeepseekOCR2ProcessingInfo.get_num_image_tokens``."""
    return count(width, height, BASE_SIZE, IMAGE_SIZE, newlines=False)




def known(size: tuple[int, int], what: str) -> KnownCount:
    """A known count of the real checkpoint, with the arithmetic that gives it."""
    return KnownCount(size, count2(*size), f"vLLM 0.32 DeepseekOCR2ProcessingInfo.get_num_image_tokens (BASE_SIZE "
                      f"{BASE_SIZE}, IMAGE_SIZE {IMAGE_SIZE}, CROP_MODE True, 2-6 crops): {what}")


ADAPTER = Adapter(
    name="deepseek_ocr2",
    title="DeepSeek-OCR-2",
    model_types=("deepseek_vl_v2",),
    architectures=("DeepseekOCR2ForCausalLM",),  # (DeepSeek-VL2 shares the model type)
    feature_tokens={"image": "<image>"},
    placeholders={"image": "<image>"},
    controls=(),
    geometry={"image": geometry},
    geometry_from_count={"image": from_count(count2, BASE_SIZE, IMAGE_SIZE)},
    known_counts={"image": (
        known((640, 480), "a page within 768x768: no crops, 16x16 + 1 = 257"),
        known((1191, 1684), "A4 portrait at 144 dpi: 2x3 tiles, 257 + 6x144 = 1121"),
        known((1920, 1080), "16:9: 2x1 tiles, 257 + 2x144 = 545"),
    )},
    tasks=TASKS,
    document_dpi=DOCUMENT_DPI,
    fixed_geometry=FIXED,
    grounding=box_formats.DEEPSEEK_OCR,
    breaks=lambda grid: {"view separator": 1},  # 256 + 1 + 144 a tile: no newline tokens
)
