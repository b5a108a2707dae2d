"""dots.ocr (``rednote-hilab/dots.ocr``, vLLM 0.32's ``DotsOCRForCausalLM``): a page reader on Qwen2-VL's processing.

vLLM serves it with Qwen2-VL's multimodal processor (``dots_ocr.py`` registers ``Qwen2VLMultiModalProcessor`` with
its own ``DotsOCRProcessingInfo``): 14-px patches merged 2x2, one ``<|imgpad|>`` per 28x28 px of the page resized by
Qwen's ``smart_resize`` into [min_pixels, max_pixels]; ``<|img|><|imgpad|><|endofimg|>`` (the model class's
``get_placeholder_str``) expands to one ``<|imgpad|>`` per cell (the range holds the pads alone). The pixel bounds are
the checkpoint's preprocessor values and dots' own client constants (``dots_ocr/utils/consts.py``: ``MIN_PIXELS=3136``,
``MAX_PIXELS=11289600``; its parser refuses a ``min_pixels`` below or a ``max_pixels`` above them). Per request vLLM
0.32 takes ``min_pixels`` / ``max_pixels`` and ``size.shortest_edge`` / ``size.longest_edge`` as the same bounds
(``Qwen2VLProcessingInfo._complete_mm_processor_size_aliases``); the controls keep dots' names and go as ``size``.

Its templates join a message's content as a string: its recipe serves it with ``--chat-template-content-format
string`` (the entries' ``chat_template_content_format``), so vLLM writes the placeholder and a newline before the text.
Its answers (a JSON list of layout cells with boxes in the pixels of the resized page) are parsed elsewhere.
"""

from __future__ import annotations

from . import box_formats
from .base import Adapter, KnownCount, Task
from .qwen_grid import SIZE_ALIASES, count_rule, geometry, pixel_controls

#: dots' own bounds on the resized area (``dots_ocr/utils/consts.py``; the checkpoint's preprocessor_config.json).
MIN_PIXELS, MAX_PIXELS = 3136, 11289600
FACTOR = 28  # 14-px patches, 2x2 merged into one token
DPI = 200
"""dots' parser rasterises PDF pages at 200 dpi (``dots_ocr/parser.py``: ``dpi = 200`` -> ``get_image_by_fitz_doc``)."""

_PROMPTS = "rednote-hilab/dots.ocr dots_ocr/utils/prompts.py (release be77dff)"

#: dots.ocr's documented prompts (``dict_promptmode_to_prompt`` at the release), verbatim.
LAYOUT_ALL_EN = """Please output the layout information from the PDF image, including each layout element's bbox, its category, and the corresponding text content within the bbox.

1. Bbox format: [x1, y1, x2, y2]

2. Layout Categories: The possible categories are ['Caption', 'Footnote', 'Formula', 'List-item', 'Page-footer', 'Page-header', 'Picture', 'Section-header', 'Table', 'Text', 'Title'].

3. Text Extraction & Formatting Rules:
    - Picture: For the 'Picture' category, the text field should be omitted.
    - Formula: Format its text as LaTeX.
    - Table: Format its text as HTML.
    - All Others (Text, Title, etc.): Format their text as Markdown.

4. Constraints:
    - The output text must be the original text from the image, with no translation.
    - All layout elements must be sorted according to human reading order.

5. Final Output: The entire output must be a single JSON object.
"""  # noqa: E501
LAYOUT_ONLY_EN = ("Please output the layout information from this PDF image, including each layout's bbox and its "
                  "category. The bbox should be in the format [x1, y1, x2, y2]. The layout categories for the PDF "
                  "document include ['Caption', 'Footnote', 'Formula', 'List-item', 'Page-footer', 'Page-header', "
                  "'Picture', 'Section-header', 'Table', 'Text', 'Title']. Do not output the corresponding text. The "
                  "layout result should be in JSON format.")
OCR = "Extract the text content from this image."
GROUNDING_OCR = "Extract text from the given bounding box on the image (format: [x1, y1, x2, y2]).\nBounding Box:\n"
"""dots' parser appends the box (``prompt + str(bbox)``, ``[x1, y1, x2, y2]`` in the resized page's pixels)."""

TASKS = (
    Task("Layout and text (JSON cells)", LAYOUT_ALL_EN, f"{_PROMPTS}: prompt_layout_all_en"),
    Task("Layout only", LAYOUT_ONLY_EN, f"{_PROMPTS}: prompt_layout_only_en"),
    Task("OCR (text, no headers or footers)", OCR, f"{_PROMPTS}: prompt_ocr"),
    Task("Text in a box", GROUNDING_OCR + "{what}", f"{_PROMPTS}: prompt_grounding_ocr, the box appended as "
         "dots_ocr/parser.py does ([x1, y1, x2, y2] in the resized page's pixels)"),
)

ADAPTER = Adapter(
    name="dots_ocr", title="dots.ocr", model_types=("dots_ocr",), feature_tokens={"image": "<|imgpad|>"},
    placeholders={"image": "<|img|><|imgpad|><|endofimg|>"}, aliases=SIZE_ALIASES,
    controls=pixel_controls(FACTOR, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS), low=MIN_PIXELS),
    geometry={"image": geometry},
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                   "(preprocessor: patch 14, merge 2, min_pixels 3136, max_pixels 11289600)"),
        KnownCount((1654, 2339), 4956, "an A4 page at dots' 200 dpi: smart_resize -> 1652x2352, 59x84 cells (under "
                   "the checkpoint's max_pixels 11289600, so unscaled; given here, as the tiny entry sends less)",
                   {"max_pixels": MAX_PIXELS}),
        KnownCount((1654, 2339), 1260, "the same page at max_pixels 1003520 (1280x28x28): 840x1176 -> 30x42 cells",
                   {"max_pixels": 1003520}),
    )},
    tasks=TASKS, document_dpi=DPI,
    grounding=box_formats.DOTS_OCR,  # cells in pixels of the page as its processor resized it
)
