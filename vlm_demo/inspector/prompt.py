"""The expanded prompt as HTML: one element per token with its details on hover, each item's range marked and split
into its tiles or frame groups where the geometry says so."""

from __future__ import annotations

import html

from .core import Expansion, Inspection


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
