"""The prompt and expansion panels and Export of a render: the highlighted prompt with the settings it went with, the
budget bar and each document's cost, the expansion table, the gallery, a document read page by page, and why a
message could not be sent as it stands. Gradio-free (each view testable without a page)."""

from __future__ import annotations

import html
import json
import shlex
from collections.abc import Sequence
from typing import Any

from ..export import chat_completions_body, curl_command, pages_snippet, python_snippet, serve_command
from ..inspector import (Expansion, Inspection, clip_text, contact_sheet, cut_seconds, prompt_html,
                         run_length_text, waveform)
from ..inspector.verdict import Verdict
from ..intake import Page, page_ranges, picture
from ..service import ChatRequest, ChatService, page_requests
from .overlays import OVERLAYS, image_file, overlay_file


BOX_HEADERS = ["label", "x1", "y1", "x2", "y2"]


TABLE_HEADERS = ["item", "token (id)", "count", "range", "size → processed", "grid or frames"]
"""The expansion table's columns (few and short: the panel is a third of the page, a phone's width on a phone)."""


TABLE_WIDTHS = ["12%", "18%", "12%", "14%", "24%", "20%"]
"""Their widths: the table fits its panel, and each column holds its headers' words and its longest number whole from a
390-px phone (in its 11-px type) to a desktop: "(151655)" in token, "12345-" in range, "1190x1684" in size; a name or
token too long for its column wraps inside its cell (the table used to scroll sideways)."""


def budget_html(inspection: Inspection) -> str:
    """A bar: each modality's tokens, text tokens and free context of max_model_len."""
    b = inspection.budget
    pct = (lambda n: 100 * n / b.max_model_len) if b.max_model_len else (lambda n: 0)
    media = [(m, n) for m, n in b.media_tokens.items()] or [("image", 0)]
    title = ", ".join(f"{m} {n}" for m, n in media)
    bars = "".join(f'<div class="{m}" style="width:{pct(n):.2f}%"></div>' for m, n in media)
    words = " · ".join(f"{m} {n:,} ({pct(n):.1f}%)" for m, n in media)
    return (f'<div class="budget" title="{title}, text {b.text_tokens}, free {b.free}">{bars}'
            f'<div class="txt" style="width:{pct(b.text_tokens):.2f}%"></div></div>'
            f'<p class="budget-text">{b.total:,} of {b.max_model_len:,} tokens: {words} · '
            f'text {b.text_tokens:,} · ' + (f"free {b.free:,}" if b.free > 0 else
                                            f"<b>no room for an answer ({b.total - b.max_model_len:,} over the "
                                            "context): it cannot be sent</b>") + '</p>'
            + (f'<p class="budget-documents">{html.escape(docs)}</p>' if (docs := documents_text(inspection)) else "")
            + "".join(f'<p class="budget-clip{" cut" if cut_seconds(e) else ""}">{html.escape(item_name(e))}'
                      f'{f" ({html.escape(e.name)})" if e.name else ""}: {html.escape(clip_text(e))}</p>'
                      for e in inspection.items.get("audio", ())))


def unsendable(inspections: Sequence[Inspection]) -> str:
    """Why a message whose render is ``inspections`` (a document read page by page: each page's request's) could not
    be sent: no room for an answer in the context; "" where it can be sent."""
    over = [i for i in inspections if i.budget.free <= 0]
    if not over:
        return ""
    window = over[0].budget.max_model_len
    if len(inspections) > 1:
        pages = [e.page for i in over for e in i.items.get("image", ())[-1:] if e.page is not None]
        which = f"page {pages[0]}'s" if len(pages) == 1 else f"pages {page_ranges(pages)}'s" if pages else "a"
        return (f"{which} request does not fit the context ({max(i.budget.total for i in over):,} of {window:,} "
                "tokens): lower the dpi")
    return (f"the prompt is {over[0].budget.total:,} tokens and the context holds {window:,}: no room for an answer "
            "(fewer pages or pictures, a lower dpi or image setting, or clear the chat)")


def item_name(e: Expansion) -> str:
    """How the panels name an item: "image 2", "video 1", or a document's page: "page 3 of report.pdf"."""
    return f"page {e.page} of {e.source}" if e.page is not None else f"{e.modality} {e.index + 1}"


def documents_text(inspection: Inspection) -> str:
    """Each document's pages and what they cost together against the context window ("report.pdf: 3 pages at 144
    dpi, 3,330 tokens, 40.6% of the context"), and the pages past the context's end in this request ("pages 5-9 do
    not fit: the context ends in page 5"); "" without documents."""
    found: dict[str, list[Expansion]] = {}
    for e in inspection.items.get("image", ()):
        if e.source is not None:
            found.setdefault(e.source, []).append(e)
    window = inspection.budget.max_model_len
    lines = []
    for source, pages in found.items():
        tokens = sum(e.length for e in pages)
        dpis = sorted({e.dpi for e in pages if e.dpi})
        at = f" at {', '.join(map(str, dpis))} dpi" if dpis else ""
        share = f", {100 * tokens / window:.1f}% of the context" if window else ""
        line = f"{source}: {len(pages)} page{'s' if len(pages) != 1 else ''}{at}, {tokens:,} tokens{share}"
        past = [e.page for e in pages if window and e.offset + e.length > window]
        if past:
            line += (f"; {'pages' if len(past) > 1 else 'page'} {page_ranges(past)} do{'es' if len(past) == 1 else ''}"
                     f" not fit: the context ends at {window:,} tokens (read them page by page, or fewer pages, or a "
                     "lower dpi)")
        lines.append(line)
    return " · ".join(lines)


def image_table(inspection: Inspection) -> list[list[Any]]:
    """One row per multimodal item for the expansion table (``TABLE_HEADERS``)."""
    def size(e: Expansion) -> str:
        if e.modality == "audio":
            return (f"{e.seconds:.1f} s, {e.rate_in / 1000:g} → {e.rate / 1000:g} kHz"
                    if e.seconds is not None and e.rate_in and e.rate else "a video's own sound")
        shown = f"{e.orig_size[0]}x{e.orig_size[1]}" if e.orig_size else "-"
        if e.dpi:
            shown += f" at {e.dpi} dpi"
        if e.processed_size and e.processed_size != e.orig_size:
            shown += f" → {e.processed_size[0]}x{e.processed_size[1]}"
        return shown

    def grid(e: Expansion) -> str:
        if e.modality == "video":
            return frames_text(e)
        if e.modality == "audio":
            frames = f"{e.feature_frames:,} frames" if e.feature_frames else "-"
            return frames + (f", last {cut:.1f} s cut" if (cut := cut_seconds(e)) else "")
        shown = f"{e.grid[0]}x{e.grid[1]}" if e.grid else "-"
        return shown + (" + thumbnail" if e.thumbnail else "")
    return [[item_name(e), f"{inspection.token_texts.get(e.token_id, e.placeholder)} ({e.token_id})", e.count,
             f"{e.offset}-{e.offset + e.length - 1}", size(e), grid(e)]
            for e in inspection.expansions()]


def frames_text(e: Expansion) -> str:
    """A video's sampling and grouping in words ("8 sampled at 0.00-3.92 s; 4 groups of 2 frames, 140 tokens
    each"); "-" for an image."""
    if e.modality != "video":
        return "-"
    sampled = "frames: sampled by the server" if e.num_frames is None else f"{e.num_frames} sampled"
    if e.timestamps_s:
        sampled += f" at {e.timestamps_s[0]:.2f}-{e.timestamps_s[-1]:.2f} s"
    groups = e.groups or ()
    each = f"{groups[0]} tokens each" if groups and len(set(groups)) == 1 else ", ".join(map(str, groups)) + " tokens"
    per = f" of {e.frames_per_group} frame{'s' if e.frames_per_group != 1 else ''}" if e.frames_per_group else ""
    return f"{sampled}; {len(groups)} group{'s' if len(groups) != 1 else ''}{per}, {each}"


def panels(service: ChatService, inspection: Inspection, request: ChatRequest) -> dict[str, Any]:
    """Values of the prompt and expansion panels for the inspection of ``request``, by output name (the gallery:
    its pictures' files and captions; the page shows its first one open)."""
    images = [picture(item) for item in request.items("image")]
    center_crop = service.profile(inspection.model).adapter.center_crop
    who = "vLLM inserted the placeholders" if inspection.content_format == "string" else "the template emits them"
    header = f'<p class="content-format">content format: <b>{inspection.content_format}</b> ({who})</p>'
    header += f'<p class="sent-settings">{html.escape(settings_text(inspection))}</p>'
    if inspection.geometry_note:
        header += f'<p class="geometry-note">{inspection.geometry_note}: counts, ids and ranges are vLLM\'s; no grid drawn</p>'

    gallery = [(overlay_file(img, im, center_crop),
                f"{item_name(im)}: {im.count} tokens" + (f", {im.grid[0]}x{im.grid[1]}" if im.grid else ""))
               for img, im in zip(images, inspection.items.get("image", ()), strict=False) if img is not None]
    for video in inspection.items.get("video", ()):
        thumbnails = _nth_frames(inspection, video.index)
        if thumbnails:
            gallery.append((image_file(contact_sheet(video, thumbnails), OVERLAYS),
                            f"video {video.index + 1}: {frames_text(video)}"))
    for clip in inspection.items.get("audio", ()):
        peaks = _nth_frames(inspection, clip.index, "audio")
        if peaks:
            cut = f", the last {c:.1f} s cut" if (c := cut_seconds(clip)) else ""
            gallery.append((image_file(waveform(clip, peaks), OVERLAYS), f"{item_name(clip)}: {clip.count} tokens{cut}"))
    return {"prompt": header + prompt_html(inspection, inspection.special_tokens), "runs": run_length_text(inspection),
            "table": image_table(inspection), "gallery": gallery, "budget": budget_html(inspection)}


def pages_view(service: ChatService, rendered: list[tuple[ChatRequest, Inspection]]) -> dict[str, Any]:
    """The panels of a document read page by page (``rendered``: each page's request and its inspection, in page
    order): every page's prompt, one open at a time (the first at first); a row and a picture for every page (the
    message's other attachments once); the first page's budget, and the document's total with the pages whose own
    request does not fit."""
    views = [panels(service, inspection, request) for request, inspection in rendered]
    first = views[0]
    note = (f'<p class="pages-note">each page is its own request: {len(views)} requests; open a page to see the '
            'prompt its request renders (the first is open)</p>')
    picker = "".join(
        f'<details class="page-prompt"{" open" if i == 0 else ""}><summary>{html.escape(item_name(e))}: {e.count:,} '
        f'tokens, its request {inspection.budget.total:,} of {inspection.budget.max_model_len:,}</summary>'
        f'{view["prompt"]}</details>'
        for i, (view, (_, inspection)) in enumerate(zip(views, rendered, strict=True))
        for e in inspection.items["image"][-1:])
    table = [*first["table"], *(row for view in views[1:] for row in view["table"][-1:])]
    gallery = [*first["gallery"], *(view["gallery"][-1] for view in views[1:] if view["gallery"])]
    pages = [inspection.items["image"][-1] for _, inspection in rendered]
    tokens = sum(e.length for e in pages)
    window = rendered[0][1].budget.max_model_len
    largest = max(inspection.budget.total for _, inspection in rendered)
    over = [e.page for e, (_, inspection) in zip(pages, rendered, strict=True)
            if window and inspection.budget.total >= window]
    misfit = (f"; {'pages' if len(over) > 1 else 'page'} {page_ranges(over)} do{'es' if len(over) == 1 else ''} not "
              f"fit a request of their own (a lower dpi)" if over else "")
    total = (f'<p class="budget-documents">{len(pages)} pages, {tokens:,} tokens in all; each request '
             f'{largest:,} of {window:,} tokens at most{html.escape(misfit)}</p>')
    return {**first, "prompt": note + picker, "table": table, "gallery": gallery,
            "budget": first["budget"] + total}


def rendered_view(service: ChatService, request: ChatRequest, inspection: Inspection,
                  pages: Sequence[Inspection | None] = ()) -> dict[str, Any]:
    """The panels of a rendered request, by output name (drawing pictures: run it in a worker thread); ``pages``: a
    document read page by page, every page's request's inspection (the panels show each page's request, row and
    picture, as before it was sent)."""
    if request.each_page:
        split = [one for _, one in page_requests(request)]
        rendered = [(one, found) for one, found in zip(split, pages, strict=False) if found is not None]
        return pages_view(service, rendered) if rendered else panels(service, inspection, split[0])
    return panels(service, inspection, request)


def export_view(service: ChatService, request: ChatRequest) -> dict[str, str]:
    """Export of a rendered request, by output name: the body ``vllm serve`` takes (every picture as a PNG data URL:
    megabytes, encoded here, so built only when Export is opened or asked for), the command that serves the model
    with curl, and a Python snippet; a document read page by page: one body per page."""
    found = service.profile(request.model)
    spec = found.spec
    serve = serve_command(found, service.model_path(spec.name) if spec.tiny else None)
    if request.each_page:  # one body per page
        bodies = [chat_completions_body(one, found) for _, one in page_requests(request)]
        return {"export_json": json.dumps(bodies, indent=1),
                "export_curl": serve + "\n\n# each page is its own request: request.json holds one body per page; "
                "send them together with the Python snippet",
                "export_py": pages_snippet(bodies, spec, replay_command(request))}
    body = chat_completions_body(request, found)
    return {"export_json": json.dumps(body, indent=1), "export_curl": serve + "\n\n" + curl_command(spec),
            "export_py": python_snippet(body, spec)}


def replay_command(request: ChatRequest) -> str:
    """A document read page by page, asked again from this app's command line (its documents by file name)."""
    pages = [item for item in request.turns[-1].media.get("image", ()) if isinstance(item, Page)]
    sources = list(dict.fromkeys(p.source for p in pages))
    words = ["python -m vlm_demo chat --model", shlex.quote(request.model),
             *(f"--image {shlex.quote(source)}" for source in sources),
             f"--pages {page_ranges([p.number for p in pages if p.source == sources[0]])}", f"--dpi {pages[0].dpi}",
             "--each-page", f"--text {shlex.quote(request.turns[-1].text)}"]
    return " ".join(words)


def audit_html(verdict: Verdict) -> str:
    """An endpoint model's render audit, above its rendered prompt: a badge (equal, differs, could not check) that
    opens to the details (``Verdict.text``: causes, each picture's counts, the text on both sides)."""
    how = f" · {verdict.how}" if verdict.how else ""
    return (f'<details class="audit audit-{verdict.status.replace(" ", "-")}" id="audit"><summary>server render '
            f'audit: <b>{html.escape(verdict.status)}</b>{html.escape(how)}</summary><pre>{html.escape(verdict.text())}'
            '</pre></details>')


def settings_text(inspection: Inspection) -> str:
    """The per-request settings the render went with, as vLLM got them: "processor kwargs: max_pixels=401408 ·
    video sampling: fps=2" ("processor kwargs: none (the checkpoint's own)" without any)."""
    def pairs(values: Any, scope: str = "") -> str:  # nested kwargs as the controls name them (videos_kwargs.x)
        return ", ".join(pairs(v, f"{scope}{k}.") if isinstance(v, dict) else
                         f"{scope}{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in values.items())
    line = f"processor kwargs: {pairs(inspection.mm_kwargs) or 'none'}"
    line += " (the checkpoint's own config for the rest)" if inspection.mm_kwargs else " (the checkpoint's own config)"
    for modality, options in inspection.media_io.items():
        if options:
            line += f" · {modality} {'sampling' if modality == 'video' else 'loading'}: {pairs(options)}"
    return line


def _nth_frames(inspection: Inspection, index: int, modality: str = "video") -> tuple[Any, ...]:
    found = inspection.frames.get(modality, ())
    return found[index] if index < len(found) else ()
