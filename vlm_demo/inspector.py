"""The inspector: pure functions over the engine's rendered input.

``inspect(rendered)`` -> ``Inspection`` (what the panels and ``inspect --json`` show); views: the
run-length token sequence, the highlighted prompt and each image with its tiles / partitions /
28-px cells / crop drawn over it. Multimodal items are keyed by modality ("image", "video"). Nothing here renders templates or expands placeholders: every
number comes from what vLLM produced.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from PIL import Image, ImageDraw

from .engine import RenderedPrompt


@dataclass(frozen=True)
class Expansion:
    """How one multimodal item (an image, a video) became tokens."""

    modality: str
    """"image" or "video"."""
    index: int
    """Position of the item among its modality's items in the prompt (0-based)."""
    placeholder: str
    """Text that stood for the item in the template's output."""
    token_id: int
    """Id of the feature token."""
    count: int
    """Feature tokens in its range."""
    offset: int
    """Index of the range's first token in the expanded prompt."""
    length: int
    """Positions the range covers (features plus any start/end markers inside it)."""
    orig_size: tuple[int, int] | None
    """Width and height as uploaded (None for precomputed embeddings)."""
    processed_size: tuple[int, int] | None
    """Width and height the vision encoder saw, where the family resizes."""
    grid: tuple[int, int] | None
    """Rows and columns of tiles / partitions / crops / token cells, or None."""
    thumbnail: bool | None
    """Whether a global thumbnail view was added, for tiling families."""


@dataclass(frozen=True)
class Budget:
    """Where the context window goes."""

    media_tokens: Mapping[str, int]
    """Per modality, the positions its items' ranges take."""
    text_tokens: int
    """All other prompt positions."""
    total: int
    """Prompt length."""
    max_model_len: int
    """The engine's context window."""

    @property
    def free(self) -> int:
        """Positions left for the answer."""
        return max(0, self.max_model_len - self.total)


@dataclass(frozen=True)
class Inspection:
    """Everything the panels show about one rendered request."""

    model: str
    """Registry name of the model."""
    family: str
    """The family adapter that describes it ("generic" when none does)."""
    content_format: str
    """"string" (placeholders inserted by vLLM) or "openai" (the template emits them)."""
    prompt: str
    """The chat template's output, before placeholder expansion."""
    conversation: tuple[dict[str, Any], ...]
    """The messages as the template saw them."""
    prompt_token_ids: tuple[int, ...]
    """The expanded ids the engine runs on."""
    items: Mapping[str, tuple[Expansion, ...]]
    """Per modality, one entry per item, in prompt order."""
    geometry_note: str | None
    """Why no tiles or grid are drawn (no geometry adapter for the model), else None."""
    budget: Budget
    """Token budget."""
    runs: tuple[tuple[str, int], ...]
    """The ids as runs: (special token, repeat count) and the decoded text between them."""

    def expansions(self) -> tuple[Expansion, ...]:
        """Every item of every modality, in prompt order."""
        return tuple(sorted((e for items in self.items.values() for e in items), key=lambda e: e.offset))


def inspect(rendered: RenderedPrompt, runs: tuple[tuple[str, int], ...]) -> Inspection:
    """Build the inspection of one rendered request."""
    ids = rendered.prompt_token_ids
    items = {
        modality: tuple(
            Expansion(
                modality=modality,
                index=i,
                placeholder=rendered.placeholders.get(modality, ""),
                token_id=rendered.token_ids[modality],
                count=sum(1 for t in ids[r.offset:r.offset + r.length] if t == rendered.token_ids[modality]),
                offset=r.offset,
                length=r.length,
                orig_size=g.orig_size,
                processed_size=g.processed_size,
                grid=g.grid,
                thumbnail=g.thumbnail,
            )
            for i, (r, g) in enumerate(zip(ranges, rendered.geometry[modality], strict=True))
        )
        for modality, ranges in rendered.ranges.items()
    }
    media = {modality: sum(e.length for e in found) for modality, found in items.items()}
    return Inspection(
        model=rendered.model,
        family=rendered.family,
        content_format=rendered.content_format,
        prompt=rendered.prompt,
        conversation=rendered.conversation,
        prompt_token_ids=ids,
        items=items,
        geometry_note=rendered.geometry_note,
        budget=Budget(media, len(ids) - sum(media.values()), len(ids), rendered.max_model_len),
        runs=runs,
    )


def to_json(inspection: Inspection) -> dict[str, Any]:
    """The ``inspect --json`` object: per modality ``images`` / ``videos`` lists and token counts."""
    out: dict[str, Any] = {
        "model": inspection.model,
        "family": inspection.family,
        "content_format": inspection.content_format,
        "prompt": inspection.prompt,
        "prompt_token_ids": list(inspection.prompt_token_ids),
        "max_model_len": inspection.budget.max_model_len,
        "num_image_tokens": 0,
        "num_text_tokens": inspection.budget.text_tokens,
        "images": [],
        "geometry_note": inspection.geometry_note,
    }
    for modality, found in inspection.items.items():
        out[f"num_{modality}_tokens"] = inspection.budget.media_tokens[modality]
        out[f"{modality}s"] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(e).items()
                                if k not in ("index", "modality")} for e in found]
    return out


def run_length_text(inspection: Inspection) -> str:
    """Compact text of the sequence, e.g. ``<img> <IMG_CONTEXT>x1792 </img>``; plain text stays text."""
    pieces = [f" {text}x{n} " if n > 1 else f" {text} " if _is_token(text) else text
              for text, n in inspection.runs]
    return re.sub(r" {2,}", " ", "".join(pieces)).strip()


def _is_token(text: str) -> bool:
    return text.startswith("<") and text.endswith(">") and " " not in text


def prompt_html(inspection: Inspection, special_tokens: tuple[str, ...] = ()) -> str:
    """The rendered prompt as HTML: image placeholders and special tokens highlighted."""
    placeholders = {e.placeholder for e in inspection.expansions() if e.placeholder}
    names = sorted(placeholders | set(special_tokens), key=len, reverse=True)
    if not names:
        return f'<pre class="prompt">{html.escape(inspection.prompt)}</pre>'
    pattern = re.compile("|".join(re.escape(n) for n in names))
    parts, pos = [], 0
    for match in pattern.finditer(inspection.prompt):
        parts.append(html.escape(inspection.prompt[pos:match.start()]))
        cls = "ph" if match.group() in placeholders else "sp"
        parts.append(f'<mark class="{cls}">{html.escape(match.group())}</mark>')
        pos = match.end()
    parts.append(html.escape(inspection.prompt[pos:]))
    return f'<pre class="prompt">{"".join(parts)}</pre>'


def draw_overlay(image: Image.Image, expansion: Expansion, center_crop: bool = False) -> Image.Image:
    """The image with what the processor did drawn over it: tile / partition / cell grid, or the crop."""
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out, "RGBA")
    w, h = out.size
    line = max(1, round(min(w, h) / 200))
    if expansion.grid is not None:
        rows, cols = expansion.grid
        for c in range(1, cols):
            x = round(c * w / cols)
            draw.line([(x, 0), (x, h)], fill=(255, 0, 80, 200), width=line)
        for r in range(1, rows):
            y = round(r * h / rows)
            draw.line([(0, y), (w, y)], fill=(255, 0, 80, 200), width=line)
        draw.rectangle([0, 0, w - 1, h - 1], outline=(255, 0, 80, 230), width=line * 2)
    elif center_crop and w != h:
        side = min(w, h)
        left, top = (w - side) // 2, (h - side) // 2
        draw.rectangle([0, 0, w, h], fill=(0, 0, 0, 110))
        out.paste(image.convert("RGB").crop((left, top, left + side, top + side)), (left, top))
        draw = ImageDraw.Draw(out, "RGBA")
        draw.rectangle([left, top, left + side - 1, top + side - 1], outline=(255, 0, 80, 230), width=line * 2)
    return out
