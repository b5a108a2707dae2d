"""What the page shows of an answer besides its panels: the stats line (while it streams and once done), its figures as
data, what a page cost a reader, and a reader's answer as the document it describes. Gradio-free."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence
from typing import Any

from .. import profile
from ..inspector import Expansion
from ..inspector.reading_cost import DocumentCost, page_cost
from ..service import ChatRequest, Done, Figures, PageAnswer, composed


def stats_data(stats: Figures | None, status: str, marks: dict[str, float] | None = None) -> dict[str, Any]:
    """The answer's figures as data (the ``stats_data`` output), with where the answer stands, and when done
    the ``marks``: wall-clock times (``time.time()``) at which the handler started, had read the message, got
    the render, had the panels, and yielded the first answer text (the benchmark's first-token steps)."""
    return {"status": status, **(dataclasses.asdict(stats) if stats else {}), **({"marks": marks} if marks else {})}


def stats_text(stats: Figures, stopped: bool = False) -> str:
    """The stats line under the chat: the wait the person had for the first token (where the question waited for
    its engine's start, split into that start and the prefill after it), then the answer's figures; for a stopped
    answer, how far it went."""
    waited = stats.wait_s >= 0.05
    if stopped and not stats.tokens:
        return (f"waited **{stats.wait_s:.1f} s** for the engine to start · " if waited else "") + \
            "**stopped** before the first token"
    first = (f"first token after **{stats.wait_s + stats.ttft_s:.2f} s**: the engine's start {stats.wait_s:.1f} s + "
             f"prefill {stats.ttft_s:.2f} s" if waited else f"time to first token **{stats.ttft_s:.2f} s**")
    line = (f"{'**stopped** after ' if stopped else ''}{stats.tokens} tokens · {first} · "
            f"**{stats.tokens_per_s:.1f} tokens/s**")
    if not stopped:
        line += f" · finish: {stats.finish_reason}"
    if stats.reasoning_tokens:
        line += f" · reasoning {stats.reasoning_tokens} tokens"
    if stats.prompt_tokens:
        line += f" · prompt {stats.prompt_tokens:,} tokens, {stats.cached_tokens:,} from vLLM's prefix cache"
    if stats.pages and stats.total_s:  # a document read page by page: its pace first
        pace = (f"{stats.pages} pages, each on its own: the last done at **{stats.total_s:.1f} s**, "
                f"**{stats.pages / stats.total_s:.2f} pages/s** · ")
        line = pace + line.replace("time to first token", "first page's first token")
    return line


def generating_text(stats: Figures) -> str:
    """The stats line while an answer streams: its tokens so far and their rate (at each streamed update)."""
    rate = f" · {stats.tokens_per_s:.1f} tokens/s" if stats.tokens_per_s else ""
    return f"generating… **{stats.tokens}** tokens{rate}"


def stats_of(done: Done) -> Figures:
    """The figures of a finished answer."""
    return done.figures


def document_view(model: Any, request: ChatRequest) -> Callable[[str, Sequence[PageAnswer]], str]:
    """How the chat shows the answers of ``model`` (its profile, or its entry) to ``request``, as a function of the
    answer and its pages' parts (a document read page by page): a reader's as the document it describes (its box
    format's ``document``; page by page, each page's part under its heading), else "" (the answer as it is)."""
    grounding = profile.profile_of(model).adapter.grounding if model is not None else None
    if grounding is None or grounding.document is None:
        return lambda answer, pages: ""
    document = grounding.document
    if request.each_page:
        return lambda answer, pages: composed(pages, document) if pages else ""
    return lambda answer, pages: document(answer)


def reading_text(adapter: Any, pages: Sequence[tuple[Expansion | None, int]]) -> str:
    """What each page cost, for a document reader or a document's pages: text tokens out per vision token in
    (DeepSeek-OCR's measure), per page and in all, with which vision tokens count said in a tooltip; "" where no page
    or reader picture was read. ``pages``: each page's (or the picture's) expansion and its tokens generated."""
    found = [(e, n) for e, n in pages if e is not None and e.modality == "image"]
    if not found or not (adapter.tasks or any(e.page is not None for e, _ in found)):
        return ""
    costs = [page_cost(e, n, breaks=adapter.breaks(e.grid) if adapter.breaks else None) for e, n in found]
    total = DocumentCost(tuple(costs))

    def figure(c: Any) -> str:
        return f"{c.text_out:,} / {c.vision_in:,} = **{c.ratio:.2f}**" if c.ratio is not None else "-"
    each = " · ".join(f"{c.label}: {figure(c)}" for c in costs) if len(costs) > 1 else ""
    said = html.escape(costs[0].counted, quote=True)
    return (f'<span class="reading" title="{said}">text tokens out per vision token in: '
            + (f"{each} · all: {figure(total)}" if each else figure(total)) + "</span>")
