"""Grounding formats: the boxes and points a model answers with, parsed without ``eval``.

Each family adapter names its format (``Adapter.grounding``); this module holds the parsers and what a
format is. A parser takes the answer so far (a stream may be cut anywhere) and returns the complete items
only: a box needs four numbers, a point two; corners given the wrong way round are ordered; anything
else (a cut-off object, three numbers, text that is no number) is left out, never raised.

Two kinds of format: a detector's (Qwen-VL, InternVL: "where is X", asked in Detect mode) and a document
reader's (dots.ocr, DeepSeek-OCR, LightOnOCR's bbox variants: a page's layout as cells, each with its
category, its text where the format carries one, and its place in the reading order). PaddleOCR-VL and
GLM-OCR answer one element per task prompt (``OCR:``, ``Table Recognition:`` ...) with no boxes: they have
no format here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

NUMBER = r"-?\d+(?:\.\d+)?"


@dataclass(frozen=True)
class Found:
    """One box or point in the format's own coordinate space."""

    label: str
    """What the model called it ("" where it gave no label); a reader's cell: its category ("Title", "table")."""
    box: tuple[float, float, float, float] | None = None
    """x1, y1, x2, y2 with x1 <= x2 and y1 <= y2, or None for a point."""
    point: tuple[float, float] | None = None
    """x, y, or None for a box."""
    text: str | None = None
    """A reader's cell: its text as the answer gives it (Markdown, LaTeX or HTML; "" for a cell without text,
    such as a picture); None in formats that carry no text."""
    order: int | None = None
    """A reader's cell: its place in the answer's reading order, from 1 (the boxes of one DeepSeek-OCR
    reference share it); None in the detectors' formats."""


@dataclass(frozen=True)
class Grounding:
    """A family's grounding format."""

    name: str
    """How the format is called in the page and in ``ground --json`` (e.g. "qwen2.5-vl-json")."""
    space: Literal["processed", "relative"]
    """``processed``: pixels of the image the processor made (Qwen2.5-VL); ``relative``: 0..``scale`` of the
    image's width and height (Qwen2-VL, Qwen3-VL, InternVL)."""
    parse: Callable[[str], tuple[Found, ...]]
    """The complete items of an answer (or of the part of it streamed so far)."""
    detect_prompt: Callable[[str], str] | None = None
    """The question Detect mode asks for ``what``, in the family's own prompt style; None for a reader's format
    (its boxes come with the page's reading, not from a "where is X" question): no Detect mode."""
    detect_regex: Callable[[str, tuple[int, int]], str] | None = None
    """The grammar (a vLLM structured-outputs regex) Detect mode holds the answer for ``what`` to, every
    coordinate inside ``bounds`` (``Grounding.bounds``), so it always parses and always lands on the picture;
    None where ``detect_prompt`` is."""
    scale: int = 1000
    """The top of a relative space (DeepSeek-OCR's grid: 999)."""
    document: Callable[[str], str] | None = None
    """A reader's answer (or as much as has streamed) as the document it describes, in Markdown: its cells' text in
    reading order, the boxes' tags and numbers left out (the boxes are drawn over the page); None: the answer is
    shown as it is."""
    tags: tuple[str, ...] = ()
    """The format's tags that are special tokens (InternVL's ``<ref>``/``<box>``, Qwen2-VL's box tokens): the
    request keeps special tokens in the output (``skip_special_tokens=False``), and the answer shows these
    and no other special token; a person may type them in a question."""

    @property
    def detects(self) -> bool:
        """Whether the format has Detect mode (a question and a grammar for "where is X")."""
        return self.detect_prompt is not None and self.detect_regex is not None

    def bounds(self, processed_size: tuple[int, int] | None) -> tuple[int, int] | None:
        """The top of the space's x and y: the processed image's size, or the relative scale; None for a
        processed space whose size is not known."""
        if self.space == "relative":
            return self.scale, self.scale
        return processed_size


def ordered(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, float, float]:
    """The box with its corners ordered (x1 <= x2, y1 <= y2)."""
    return min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)


def _numbers(values: object, n: int) -> tuple[float, ...] | None:
    """``values`` as ``n`` finite numbers, else None."""
    if not isinstance(values, list) or len(values) != n:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e9 for v in values):
        return None
    return tuple(float(v) for v in values)


_OBJECT = re.compile(r"\{[^{}]*\}")


def qwen_json(text: str) -> tuple[Found, ...]:
    """Qwen2.5-VL / Qwen3-VL JSON: objects with ``bbox_2d`` [x1, y1, x2, y2] or ``point_2d`` [x, y] and a
    ``label``, alone, in a list, or in a ```json fence; also their ``<points x1=".." y1=".." alt="..">``
    tags. Each complete object counts; a cut-off one does not."""
    found: list[Found] = []
    for match in _OBJECT.finditer(text):
        try:
            item = json.loads(match.group())
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        label = item.get("label")
        label = label if isinstance(label, str) else ""
        if (box := _numbers(item.get("bbox_2d"), 4)) is not None:
            found.append(Found(label, box=ordered(*box)))
        elif (point := _numbers(item.get("point_2d"), 2)) is not None:
            found.append(Found(label, point=(point[0], point[1])))
    return tuple(found) + qwen_points(text)


_POINTS = re.compile(r"<points\b([^>]*)>([^<]*)</points>")
_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def qwen_points(text: str) -> tuple[Found, ...]:
    """``<points x1="10" y1="20" x2=".." y2=".." alt="label">label</points>``: one point per x/y pair."""
    found: list[Found] = []
    for match in _POINTS.finditer(text):
        attrs = dict(_ATTR.findall(match.group(1)))
        label = attrs.get("alt") or match.group(2).strip()
        k = 1
        while f"x{k}" in attrs and f"y{k}" in attrs:
            try:
                found.append(Found(label, point=(float(attrs[f"x{k}"]), float(attrs[f"y{k}"]))))
            except ValueError:
                pass
            k += 1
    return tuple(found)


_QWEN2_BOX = re.compile(
    r"(?:<\|object_ref_start\|>(?P<label>.*?)<\|object_ref_end\|>)?\s*<\|box_start\|>(?P<body>.*?)<\|box_end\|>",
    re.DOTALL)
_PAIR = re.compile(rf"\(\s*({NUMBER})\s*,\s*({NUMBER})\s*\)")


def qwen2_box_tokens(text: str) -> tuple[Found, ...]:
    """Qwen2-VL: ``<|object_ref_start|>label<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)<|box_end|>``
    (0-1000); a box block without its reference keeps the label before it."""
    found: list[Found] = []
    label = ""
    for match in _QWEN2_BOX.finditer(text):
        if match.group("label") is not None:
            label = match.group("label").strip()
        pairs = _PAIR.findall(match.group("body"))
        if len(pairs) == 2:
            (x1, y1), (x2, y2) = pairs
            found.append(Found(label, box=ordered(float(x1), float(y1), float(x2), float(y2))))
    return tuple(found)


_INTERNVL = re.compile(r"(?:<ref>(?P<label>.*?)</ref>)?\s*<box>(?P<body>.*?)</box>", re.DOTALL)
_LIST = re.compile(r"\[([^\[\]]*)\]")


def internvl_refs(text: str) -> tuple[Found, ...]:
    """InternVL: ``<ref>label</ref><box>[[x1, y1, x2, y2], ...]</box>`` (0-1000), one box per inner list."""
    found: list[Found] = []
    label = ""
    for match in _INTERNVL.finditer(text):
        if match.group("label") is not None:
            label = match.group("label").strip()
        for inner in _LIST.findall(match.group("body")):
            values = re.findall(NUMBER, inner)
            if len(values) == 4 and len(inner.split(",")) == 4:
                found.append(Found(label, box=ordered(*(float(v) for v in values))))
    return tuple(found)


_DECODER = json.JSONDecoder()


def dots_ocr_cells(text: str) -> tuple[Found, ...]:
    """dots.ocr: a JSON list of layout cells ``{"bbox": [x1, y1, x2, y2], "category": "Text", "text": "..."}``
    in reading order, boxes in pixels of the image its processor resized (Qwen2-VL's smart resize); a cell
    without ``text`` (a Picture, or every cell of the layout-only prompt's answer) has "". Each complete cell
    counts, a cut-off one does not. Each object is read by the JSON decoder from its ``{``, so braces and
    brackets inside a cell's text (a formula's ``\\frac{a}{b}``) are text, not structure."""
    found: list[Found] = []
    start = text.find("{")
    while start != -1:
        try:
            item, end = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(item, dict) and (box := _numbers(item.get("bbox"), 4)) is not None:
            category, body = item.get("category"), item.get("text")
            found.append(Found(category if isinstance(category, str) else "", box=ordered(*box),
                               text=body if isinstance(body, str) else "", order=len(found) + 1))
        start = text.find("{", end)
    return tuple(found)


_DEEPSEEK_REF = re.compile(r"<\|ref\|>(?P<label>.*?)<\|/ref\|>\s*<\|det\|>(?P<body>.*?)<\|/det\|>", re.DOTALL)
_DEEPSEEK_OPEN = "<|ref|>"


def deepseek_refs(text: str) -> tuple[Found, ...]:
    """DeepSeek-OCR / -OCR-2: ``<|ref|>label<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>`` on a 0-999 grid
    (its own scripts draw ``x / 999 * width``), one box per inner list; the Markdown after a reference, up to
    the next ``<|ref|>``, is that cell's text. A reference counts once its ``<|/det|>`` has come; the last
    cell's text is what has streamed so far (a tag cut off at the end left out)."""
    found: list[Found] = []
    for order, match in enumerate(_DEEPSEEK_REF.finditer(text), 1):
        after = text.find(_DEEPSEEK_OPEN, match.end())
        body = text[match.end():after if after != -1 else len(text)]
        if after == -1:
            body = _without_cut_tag(body, _DEEPSEEK_OPEN)
        label = match.group("label").strip()
        for inner in _LIST.findall(match.group("body")):
            values = re.findall(NUMBER, inner)
            if len(values) == 4 and len(inner.split(",")) == 4:
                found.append(Found(label, box=ordered(*(float(v) for v in values)), text=body.strip(), order=order))
    return tuple(found)


def _without_cut_tag(text: str, tag: str) -> str:
    """``text`` less a start of ``tag`` it ends with (a stream cut inside the tag)."""
    for k in range(len(tag) - 1, 0, -1):
        if text.endswith(tag[:k]):
            return text[:-k]
    return text


_LIGHTON_IMAGE = re.compile(r"(?P<ref>!\[(?P<alt>[^\]\n]*)\]\([^)\s]+\))[ \t]*(?P<x1>\d+)[ \t]*,[ \t]*"
                            r"(?P<y1>\d+)[ \t]*,[ \t]*(?P<x2>\d+)[ \t]*,[ \t]*(?P<y2>\d+)(?![\d.])")


def lightonocr_images(text: str) -> tuple[Found, ...]:
    """LightOnOCR's bbox variants: each embedded image as ``![image](image_N.png) x1,y1,x2,y2`` (0-1000 of the
    page), the rest of the Markdown without boxes. The cell's label is the alt text ("image"), its text the
    Markdown reference without the numbers. Four numbers ending the answer count (a whole answer may end
    there), so while a stream is cut inside the last number that box may still grow by a digit."""
    found: list[Found] = []
    for match in _LIGHTON_IMAGE.finditer(text):
        box = ordered(*(float(match.group(k)) for k in ("x1", "y1", "x2", "y2")))
        found.append(Found(match.group("alt").strip() or "image", box=box, text=match.group("ref"),
                           order=len(found) + 1))
    return tuple(found)


DOTS_MARKDOWN = {"Title": "# {}", "Section-header": "## {}", "Formula": "$$\n{}\n$$", "Picture": "*[picture]*"}
"""How dots.ocr's own Markdown writer shows a cell of each category (``layoutjson2md``; the others: their text)."""


def dots_ocr_document(text: str) -> str:
    """dots.ocr's cells as Markdown in reading order: titles and section headers as headings, formulas in
    ``$$``, tables as their HTML, a picture as a mark, the rest as its text (a layout-only answer: the cells'
    categories)."""
    parts = []
    for cell in dots_ocr_cells(text):
        body = cell.text.strip()
        shown = DOTS_MARKDOWN.get(cell.label, "{}")
        parts.append(shown.format(body) if body or cell.label == "Picture" else f"*[{cell.label}]*")
    return "\n\n".join(parts)


_DEEPSEEK_TAGS = re.compile(r"<\|ref\|>.*?<\|/ref\|>\s*<\|det\|>.*?<\|/det\|>\n?|<\|grounding\|>", re.DOTALL)


def deepseek_document(text: str) -> str:
    """DeepSeek-OCR's Markdown without its ``<|ref|>``/``<|det|>`` tags (its own script's "unwrap ref, drop det"),
    a tag cut off at the end of a stream left out."""
    shown = _DEEPSEEK_TAGS.sub("", text)
    start = shown.rfind("<|")
    return shown[:start] if start != -1 and "|>" not in shown[start:] else shown


_IMAGE_REFERENCE = re.compile(r"!\[(?P<alt>[^\]\n]*)\]\([^)\s]*\)(?:[ \t]*\d+(?:[ \t]*,[ \t]*\d+){0,3}[ \t]*,?)?")


def lightonocr_document(text: str) -> str:
    """LightOnOCR's Markdown with each image reference a mark, its numbers (whole or streaming) taken off: the
    references name files of the reader's own pipeline (``image_1.png``) that nobody serves, and its box is drawn."""
    return _IMAGE_REFERENCE.sub(lambda m: f"*[{m.group('alt').strip() or 'image'}]*", text)


def up_to(n: int) -> str:
    """A regex for the integers 0..``n`` (no leading zeros): a grammar that admits only coordinates inside
    the picture (vLLM's structured outputs take regexes, not numeric ranges)."""
    digits = str(n)
    alts = ["[0-9]"] if len(digits) > 1 else []
    alts += [rf"[1-9]\d{{{k - 1}}}" for k in range(2, len(digits))]
    for i, d in enumerate(digits):
        low = 1 if i == 0 and len(digits) > 1 else 0
        if int(d) > low:
            rest = len(digits) - i - 1
            alts.append(f"{digits[:i]}[{low}-{int(d) - 1}]" + (rf"\d{{{rest}}}" if rest else ""))
    alts.append(digits)
    return "(?:" + "|".join(alts) + ")"


def _label_regex(what: str) -> str:
    return re.escape(what.strip()[:60] or "object")


def qwen_json_detect_prompt(what: str) -> str:
    return f"Locate every {without_article(what)} in the image, and output their bbox coordinates in JSON format."


def without_article(what: str) -> str:
    """``what`` without a leading article ("the red square" -> "red square"), for "every ..." phrasings."""
    return re.sub(r"^(the|a|an)\s+", "", what.strip(), flags=re.IGNORECASE) or what.strip()


def qwen_json_regex(what: str, bounds: tuple[int, int]) -> str:
    """A JSON list of 1-8 ``{"bbox_2d": [x1, y1, x2, y2], "label": "<what>"}`` objects, each number inside
    ``bounds`` (the format's space: width and height)."""
    x, y = up_to(bounds[0]), up_to(bounds[1])
    item = rf'\{{"bbox_2d": \[{x}, {y}, {x}, {y}\], "label": "{_label_regex(what)}"\}}'
    return rf"\[{item}(, {item}){{0,7}}\]"


def qwen2_detect_prompt(what: str) -> str:
    return f"Detect the bounding box of {what.strip()}."


def qwen2_regex(what: str, bounds: tuple[int, int]) -> str:
    x, y = up_to(bounds[0]), up_to(bounds[1])
    return (rf"<\|object_ref_start\|>{_label_regex(what)}<\|object_ref_end\|>"
            rf"<\|box_start\|>\({x},{y}\),\({x},{y}\)<\|box_end\|>")


def internvl_detect_prompt(what: str) -> str:
    return f"Please provide the bounding box coordinate of the region this sentence describes: <ref>{what.strip()}</ref>"


def internvl_regex(what: str, bounds: tuple[int, int]) -> str:
    x, y = up_to(bounds[0]), up_to(bounds[1])
    return rf"<ref>{_label_regex(what)}</ref><box>\[\[{x}, {y}, {x}, {y}\]\]</box>"


QWEN2_5_VL = Grounding("qwen2.5-vl-json", "processed", qwen_json, qwen_json_detect_prompt, qwen_json_regex)
"""Qwen2.5-VL: JSON in absolute pixels of the image the processor resized."""
QWEN3_VL = Grounding("qwen3-vl-json", "relative", qwen_json, qwen_json_detect_prompt, qwen_json_regex)
"""Qwen3-VL: the same JSON in 0-1000 of the image."""
QWEN2_VL = Grounding("qwen2-vl-box-tokens", "relative", qwen2_box_tokens, qwen2_detect_prompt, qwen2_regex,
                     tags=("<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>"))
"""Qwen2-VL: box tokens, 0-1000 (the tags are special tokens)."""
INTERNVL = Grounding("internvl-ref-box", "relative", internvl_refs, internvl_detect_prompt, internvl_regex,
                     tags=("<ref>", "</ref>", "<box>", "</box>"))
"""InternVL: ``<ref>``/``<box>`` tags, 0-1000 (special tokens)."""

DOTS_OCR = Grounding("dots.ocr-json", "processed", dots_ocr_cells, document=dots_ocr_document)
"""dots.ocr: layout cells in JSON, boxes in pixels of the image its processor resized (a reader: no Detect)."""
DEEPSEEK_OCR = Grounding("deepseek-ocr-ref-det", "relative", deepseek_refs, scale=999, document=deepseek_document,
                         tags=("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>", "<td>", "</td>", "<tr>",
                               "</tr>"))
"""DeepSeek-OCR and -OCR-2: ``<|ref|>``/``<|det|>`` on a 0-999 grid (added tokens of its tokenizer, ids
128816-128819, which its own scripts keep with ``skip_special_tokens=False``); ``<|grounding|>`` (128820) is
the tag its layout prompts start with ("<|grounding|>Convert the document to markdown."), so a person may type
it. A reader: no Detect."""
LIGHTONOCR_BBOX = Grounding("lightonocr-bbox", "relative", lightonocr_images, document=lightonocr_document)
"""LightOnOCR's bbox variants (LightOnOCR-2-1B-bbox ...): embedded images' boxes after their Markdown
reference, 0-1000 of the page. A reader: no Detect."""
