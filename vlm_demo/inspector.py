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
from dataclasses import asdict, dataclass, field
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
    num_frames: int | None = None
    """Videos: frames vLLM's loader sampled (None for images, or where the renderer does not say)."""
    timestamps_s: tuple[float, ...] | None = None
    """Videos: where each sampled frame sits in the clip, in seconds."""
    groups: tuple[int, ...] | None = None
    """Videos: feature tokens per group of frames that became tokens together, in prompt order."""
    frames_per_group: int | None = None
    """Videos: sampled frames per group (Qwen: 2 per temporal patch; InternVL, LLaVA-OneVision: 1), where
    the frames divide evenly among the groups."""

    def group_frames(self, k: int) -> tuple[int, ...]:
        """The 0-based sampled frames of group ``k`` (empty where the frames per group are not known)."""
        n = self.frames_per_group or 0
        return tuple(range(k * n, (k + 1) * n))


VIDEO_FIELDS = ("num_frames", "timestamps_s", "groups", "frames_per_group")
"""``Expansion`` fields that only videos have (left out of an image's JSON)."""


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
    token_texts: Mapping[int, str] = field(default_factory=dict)
    """Each prompt id's own text (the id decoded alone), where the engine's tokenizer is at hand; empty for a
    remote engine (the hover titles then give ids and positions only)."""
    mm_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """The processor kwargs the request went with (vLLM's ``mm_processor_kwargs``; the checkpoint's own config
    fills in the rest)."""
    media_io: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The media loading options it went with, per modality (vLLM's ``media_io_kwargs``: video sampling)."""
    special_tokens: tuple[str, ...] = ()
    """The special-token strings of the tokenizer that rendered it (the prompt view marks them), whether an engine
    or vLLM's renderer alone did."""
    joined: Mapping[int, tuple[int, str]] = field(default_factory=dict)
    """Where one character spans several tokens (a byte-level tokenizer's pieces of a multi-byte character, each
    alone no text): ``{position: (tokens, the character(s))}``, so the prompt view shows the character."""
    frames: Mapping[str, tuple[tuple[Any, ...], ...]] = field(default_factory=dict)
    """Per time-based modality ("video"), per item: small pictures of the frames vLLM's loader sampled
    (empty where the renderer does not give them), for the contact sheet."""

    def expansions(self) -> tuple[Expansion, ...]:
        """Every item of every modality, in prompt order."""
        return tuple(sorted((e for items in self.items.values() for e in items), key=lambda e: e.offset))


def inspect(rendered: RenderedPrompt, runs: tuple[tuple[str, int], ...],
            token_texts: Mapping[int, str] | None = None,
            joined: Mapping[int, tuple[int, str]] | None = None,
            special_tokens: tuple[str, ...] = ()) -> Inspection:
    """Build the inspection of one rendered request (``token_texts``: each id's own text, where known;
    ``joined``: characters that span several tokens; ``special_tokens``: the renderer's)."""
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
                **(_video_fields(ids, r, g, rendered.token_ids[modality], _nth(rendered.frames.get(modality), i))
                   if modality == "video" else {}),
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
        token_texts=dict(token_texts or {}),
        mm_kwargs=dict(rendered.mm_kwargs),
        media_io={m: dict(v) for m, v in rendered.media_io_kwargs.items()},
        joined=dict(joined or {}),
        special_tokens=tuple(special_tokens),
        frames={m: tuple(f.thumbnails if f is not None else () for f in found) for m, found in rendered.frames.items()},
    )


def _nth(found: tuple[Any, ...] | None, i: int) -> Any:
    return found[i] if found and i < len(found) else None


def feature_runs(ids: tuple[int, ...], offset: int, length: int, token_id: int) -> tuple[int, ...]:
    """Lengths of the unbroken runs of ``token_id`` in ``ids[offset:offset + length]``, in order."""
    runs, n = [], 0
    for t in ids[offset:offset + length]:
        if t == token_id:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return tuple([*runs, n] if n else runs)


def _video_fields(ids: tuple[int, ...], r: Any, g: Any, token_id: int, sampled: Any) -> dict[str, Any]:
    """A video's frames and groups: the sampled frames from vLLM's loader; the groups from the family's rule
    over the processor output where it has one (it must add up to the ids' count), else the runs of the
    feature token in the ids (Qwen3-VL's and InternVL's groups are separate runs)."""
    runs = feature_runs(ids, r.offset, r.length, token_id)
    groups = g.groups if g.groups and sum(g.groups) == sum(runs) else runs
    frames = len(sampled.indices) if sampled is not None else None
    per_group = frames // len(groups) if frames and groups and frames % len(groups) == 0 else None
    return {"num_frames": frames, "timestamps_s": sampled.timestamps_s if sampled is not None else None,
            "groups": tuple(groups), "frames_per_group": per_group}


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
        "num_video_tokens": 0,
        "num_text_tokens": inspection.budget.text_tokens,
        "images": [],
        "videos": [],
        "geometry_note": inspection.geometry_note,
    }
    for modality, found in inspection.items.items():
        out[f"num_{modality}_tokens"] = inspection.budget.media_tokens[modality]
        skip = {"index", "modality", *(VIDEO_FIELDS if modality != "video" else ())}
        out[f"{modality}s"] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(e).items()
                                if k not in skip} for e in found]
    return out


def run_length_text(inspection: Inspection) -> str:
    """Compact text of the sequence, e.g. ``<img> <IMG_CONTEXT>x1792 </img>``; plain text stays text."""
    pieces = [f" {text}x{n} " if n > 1 else f" {text} " if _is_token(text) else text
              for text, n in inspection.runs]
    return re.sub(r" {2,}", " ", "".join(pieces)).strip()


def _is_token(text: str) -> bool:
    return text.startswith("<") and text.endswith(">") and " " not in text


PROMPT_CSS = """
.prompt span.tile { outline: 1px dashed rgba(0, 0, 0, .35); outline-offset: -1px; }
"""
"""Rules for the prompt view's tile / frame sub-runs (``span.tile``), beside the page's ``mark.ph`` / ``mark.sp``."""

UNIFORM_TILE_FAMILIES = frozenset({"internvl", "internvl_hf"})
"""Families whose every tile (thumbnail included, last) gets the same number of feature tokens, so a run
splits into equal per-tile parts. Other tiling families (Ovis partitions, LLaVA-OneVision crops with their
newline tokens, Gemma 3 pan-and-scan crops) give no per-tile counts: their runs stay one part."""


def prompt_html(inspection: Inspection, special_tokens: tuple[str, ...] = ()) -> str:
    """The expanded prompt as HTML, one element per token with its details on hover (``title``): text and
    special tokens give "id N · 'text' · position P"; each item's range is a ``<mark class="ph">`` titled with
    which item it is, its count and range, split into per-tile parts (``span.tile``) where the geometry says
    how many tokens each tile has; special tokens are ``<mark class="sp">``."""
    ids, texts = inspection.prompt_token_ids, inspection.token_texts
    specials = set(special_tokens) | {e.placeholder for e in inspection.expansions() if e.placeholder}
    items = {e.offset: e for e in inspection.expansions()}
    parts, pos = [], 0
    while pos < len(ids):
        item = items.get(pos)
        if item is not None and item.length > 0:
            parts.append(_item_html(inspection, item, specials))
            pos += item.length
            continue
        if pos in inspection.joined:  # one character over several tokens
            n, text = inspection.joined[pos]
            title = html.escape(f"ids {', '.join(map(str, ids[pos:pos + n]))} · '{_shown(text)}' · positions "
                                f"{pos}-{pos + n - 1}")
            parts.append(f'<span title="{title}">{html.escape(text)}</span>')
            pos += n
            continue
        parts.append(_token_html(ids[pos], texts.get(ids[pos]), pos, specials))
        pos += 1
    return f'<pre class="prompt">{"".join(parts)}</pre>'


def _shown(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _token_title(token_id: int, text: str | None, position: int) -> str:
    shown = "" if text is None else f" · '{_shown(text)}'"
    return f"id {token_id}{shown} · position {position}"


def _token_html(token_id: int, text: str | None, position: int, specials: set[str]) -> str:
    title = html.escape(_token_title(token_id, text, position))
    body = html.escape(text if text is not None else f"[{token_id}]")
    if text in specials:
        return f'<mark class="sp" title="{title}">{body}</mark>'
    return f'<span title="{title}">{body}</span>'


def tile_counts(inspection: Inspection, item: Expansion) -> tuple[tuple[str, int], ...] | None:
    """(label, feature tokens) of each tile / row of the item, in prompt order, where the geometry gives them
    and they add up to the item's count: InternVL's equal tiles (thumbnail last), Qwen's rows of merged
    patches (a grid of token cells); None otherwise (the run is shown as one part)."""
    if item.groups and sum(item.groups) == item.count and item.count > 0:  # a video: its frame groups
        total = len(item.groups)
        return tuple((f"group {k + 1} of {total}{_frames_label(item, k)}", n) for k, n in enumerate(item.groups))
    if item.grid is None or item.count <= 0:
        return None
    rows, cols = item.grid
    if item.thumbnail is None and rows * cols == item.count:  # token cells: one token per cell
        return tuple((f"row {r + 1} of {rows}", cols) for r in range(rows))
    if item.thumbnail is not None and inspection.family in UNIFORM_TILE_FAMILIES:
        n = rows * cols + (1 if item.thumbnail else 0)
        if item.count % n:
            return None
        labels = [f"tile {k + 1} of {n} (row {k // cols + 1}, column {k % cols + 1})" for k in range(rows * cols)]
        if item.thumbnail:
            labels.append(f"tile {n} of {n} (thumbnail)")
        return tuple((label, item.count // n) for label in labels)
    return None


def _frames_label(item: Expansion, k: int) -> str:
    """" · frames 3-4 (1.00-1.50 s)" for group ``k`` of a video, where its frames are known."""
    frames = item.group_frames(k)
    if not frames or item.timestamps_s is None or frames[-1] >= len(item.timestamps_s):
        return ""
    first, last = frames[0], frames[-1]
    which = f"frame {first + 1}" if first == last else f"frames {first + 1}-{last + 1}"
    times = item.timestamps_s
    when = f"{times[first]:.2f} s" if first == last else f"{times[first]:.2f}-{times[last]:.2f} s"
    return f" · {which} ({when})"


def _item_html(inspection: Inspection, item: Expansion, specials: set[str]) -> str:
    """One item's range: a ``mark.ph`` holding its marker tokens and its feature-token run(s)."""
    ids, texts = inspection.prompt_token_ids, inspection.token_texts
    total = len(inspection.items.get(item.modality, ()))
    end = item.offset + item.length
    feature = texts.get(item.token_id, item.placeholder or f"[{item.token_id}]")
    title = (f"{item.modality} {item.index + 1} of {total} · {item.count} × '{_shown(feature)}' (id {item.token_id})"
             f" · positions {item.offset}-{end - 1}")
    tiles = list(tile_counts(inspection, item) or ((f"{item.modality} {item.index + 1}", item.count),))
    parts, pos = [], item.offset
    while pos < end:
        if ids[pos] != item.token_id:  # a marker inside the range (<img>, </img>, a newline token...)
            parts.append(_token_html(ids[pos], texts.get(ids[pos]), pos, specials))
            pos += 1
            continue
        run_end = pos
        while run_end < end and ids[run_end] == item.token_id:
            run_end += 1
        while pos < run_end:  # the run, cut into the tiles' parts where their counts are known
            label, n = tiles.pop(0) if tiles else (f"{item.modality} {item.index + 1}", run_end - pos)
            n = min(n, run_end - pos)
            sub = html.escape(f"{label} · {n} tokens · positions {pos}-{pos + n - 1}")
            parts.append(f'<span class="tile" title="{sub}">{html.escape(feature)}×{n}</span>')
            pos += n
    return f'<mark class="ph" title="{html.escape(title)}">{"".join(parts)}</mark>'


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


GROUP_COLOURS = ((229, 57, 53), (30, 136, 229), (67, 160, 71), (251, 140, 0), (142, 36, 170), (0, 137, 123))
"""Border colours of successive frame groups on a video's contact sheet."""


def contact_sheet(expansion: Expansion, thumbnails: tuple[Image.Image, ...], columns: int = 3,
                  cell: int = 256) -> Image.Image:
    """A video's sampled frames side by side, each with its time, its group (frames of one group share a
    border colour) and the token grid of its group drawn over it (one cell per feature token)."""
    from PIL import ImageFont

    n = len(thumbnails)
    columns = max(1, min(columns, n))
    rows = -(-n // columns)
    w0, h0 = thumbnails[0].size
    frame_h = max(1, round(cell * h0 / w0))
    text_px = max(14, cell // 16)  # readable when the sheet is shown at a panel's width
    label_h = 2 * text_px + 12  # two lines: the frame and its time; its group and tokens
    sheet = Image.new("RGB", (columns * (cell + 8) + 8, rows * (frame_h + label_h + 8) + 8), (250, 250, 250))
    draw = ImageDraw.Draw(sheet, "RGBA")
    font = ImageFont.load_default(size=text_px)
    per_group = expansion.frames_per_group or 0
    for i, thumb in enumerate(thumbnails):
        x = 8 + (i % columns) * (cell + 8)
        y = 8 + (i // columns) * (frame_h + label_h + 8)
        sheet.paste(thumb.convert("RGB").resize((cell, frame_h)), (x, y))
        group = i // per_group if per_group else None
        colour = GROUP_COLOURS[group % len(GROUP_COLOURS)] if group is not None else (120, 120, 120)
        if expansion.grid is not None:
            g_rows, g_cols = expansion.grid
            for c in range(1, g_cols):
                gx = x + round(c * cell / g_cols)
                draw.line([(gx, y), (gx, y + frame_h)], fill=(255, 0, 80, 120), width=1)
            for r in range(1, g_rows):
                gy = y + round(r * frame_h / g_rows)
                draw.line([(x, gy), (x + cell, gy)], fill=(255, 0, 80, 120), width=1)
        draw.rectangle([x - 2, y - 2, x + cell + 1, y + frame_h + 1], outline=(*colour, 255), width=3)
        when = f"{expansion.timestamps_s[i]:.2f} s" if expansion.timestamps_s and i < len(expansion.timestamps_s) else ""
        tokens = (f"group {group + 1}: {expansion.groups[group]} tokens"
                  if group is not None and expansion.groups and group < len(expansion.groups) else "")
        draw.text((x, y + frame_h + 4), f"frame {i + 1} · {when}\n{tokens}", fill=(20, 20, 20), font=font,
                  spacing=4)
    return sheet
