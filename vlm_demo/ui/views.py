"""The page's views: the HTML, text, tables and pictures its panels show, made from the inspector's and the chat
service's values. Gradio-free (nothing here imports gradio), so each view is testable without a page."""

from __future__ import annotations

import dataclasses
import hashlib
import html
import io
import json
import os
import shlex
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from .. import profile
from ..conversation import Stats
from ..export import chat_completions_body, curl_command, pages_snippet, python_snippet, serve_command
from ..families.grounding import Grounding
from ..grounding import draw as draw_boxes
from ..grounding import place
from ..grounding import rows as box_rows
from ..inspector.audit import Verdict
from ..inspector.cost import DocumentCost, page_cost
from ..inspector import Expansion, Inspection, contact_sheet, draw_overlay, prompt_html, run_length_text
from ..intake import Page, Recent, image_digest, page_ranges, picture
from ..service import ChatRequest, ChatService, Done, PageFigures, Prefilling, Waiting, composed, page_requests
from ..settings import ENCODED_IMAGES_KEPT, OVERLAY_JPEG_QUALITY

OVERLAYS = Path(tempfile.gettempdir()) / "vlm-demo-overlays"  # the expansion panel's pictures, named by content
BOX_HEADERS = ["label", "x1", "y1", "x2", "y2"]
TABLE_HEADERS = ["item", "token (id)", "count", "range", "size → processed", "grid or frames"]
"""The expansion table's columns (few and short: the panel is a third of the page, a phone's width on a phone)."""
TABLE_WIDTHS = ["12%", "18%", "12%", "14%", "24%", "20%"]
"""Their widths: the table fits its panel, and each column holds its headers' words and its longest number whole from a
390-px phone (in its 11-px type) to a desktop: "(151655)" in token, "12345-" in range, "1190x1684" in size; a name or
token too long for its column wraps inside its cell (the table used to scroll sideways)."""


def state_text(service: ChatService, name: str, starting: bool = False) -> str:
    """The status line: the model, where its engine stands (while it starts: the phase and seconds so far, bytes
    while downloading; why its last start failed) and whether its weights are random; then every other engine that
    runs or starts, the one used last first (every tab shows the same). ``starting``: a start was just asked
    for."""
    spec = service.registry.get(name)
    engines = service.engines
    note = " · **random weights**: answers are noise, prompts and token counts are real" if spec.random_weights else ""
    if spec.remote:
        state = f"**remote**: {spec.endpoint}"
    elif (progress := engines.progress(name)) is not None:
        state = f"**starting**: {progress.text()}"
    elif engines.running(spec) is None and (failed := engines.failure(name)) is not None:
        state = f"**did not start**: {failed}"
    else:
        state = f"**{engines.state(name)}**"
        if starting and state != "**ready**":
            state = "**starting**"
        elif state == "**not loaded**":
            state += " (it starts at the first question)"
    others = [f"{service.registry.get(other).label} {state}" for other, state in engines.states() if other != name
              and other in service.registry.names]
    warm = f'\n\n<span class="also-running">also running: {html.escape(" · ".join(others))}</span>' if others else ""
    return f"{spec.display_label} — engine: {state}{note}{warm}"


def picker_choices(service: ChatService) -> list[tuple[str, str]]:
    """The model picker's entries: those this machine can start now first, each as its label with a note where it
    cannot ("— needs a GPU") or its first start fetches something ("— downloads 7.5 GB at its first start")."""
    found = [(spec, service.availability(spec.name)) for spec in service.registry.models]
    return [(spec.display_label + ok.note(), spec.name)
            for spec, ok in sorted(found, key=lambda pair: not pair[1].runnable)]


def refusal_text(service: ChatService, name: str, why: str) -> str:
    """What the page says where a picked model cannot start here (the running engine stays)."""
    return f"**{service.registry.get(name).label} cannot start here**: {why}. The model stays as it was."


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
            + (f'<p class="budget-documents">{html.escape(docs)}</p>' if (docs := documents_text(inspection)) else ""))


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
        shown = f"{e.orig_size[0]}x{e.orig_size[1]}" if e.orig_size else "-"
        if e.dpi:
            shown += f" at {e.dpi} dpi"
        if e.processed_size and e.processed_size != e.orig_size:
            shown += f" → {e.processed_size[0]}x{e.processed_size[1]}"
        return shown

    def grid(e: Expansion) -> str:
        if e.modality == "video":
            return frames_text(e)
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


def image_file(image: Image.Image, folder: Path, jpeg: bool = False) -> str:
    """``image`` as a PNG (``jpeg``: a JPEG of ``OVERLAY_JPEG_QUALITY``) in ``folder``, named by its content and
    written whole (temp file, then rename).

    Gradio's own caching of PIL outputs rewrites one shared file in place, and a concurrent download of the
    same picture (16 users, one image) could read it half-written."""
    buf = io.BytesIO()
    if jpeg:
        image.convert("RGB").save(buf, format="JPEG", quality=OVERLAY_JPEG_QUALITY)
    else:
        image.save(buf, format="PNG", compress_level=1)
    data = buf.getvalue()
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.{'jpg' if jpeg else 'png'}"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    return str(path)


_OVERLAY_FILES = Recent(ENCODED_IMAGES_KEPT)


def overlay_file(image: Image.Image, expansion: Expansion, center_crop: bool) -> str:
    """The expansion picture of one image (its grid or crop drawn over it) as a file; drawn and encoded once
    per picture and grid (all ``draw_overlay`` reads), since every turn shows the earlier images again."""
    def draw() -> str:
        return image_file(draw_overlay(image, expansion, center_crop=center_crop), OVERLAYS, jpeg=True)
    key = (image_digest(image), expansion.grid, center_crop)
    path = _OVERLAY_FILES.get(key, draw)
    return path if os.path.exists(path) else draw()  # type: ignore[arg-type]  # (a cleaned temp folder)


def panels(service: ChatService, inspection: Inspection, request: ChatRequest) -> dict[str, Any]:
    """Values of the prompt and expansion panels for the inspection of ``request``, by output name (the gallery:
    its pictures' files and captions; the page shows its first one open)."""
    images = [picture(item) for item in request.items("image")]
    center_crop = profile.adapter(service.registry.get(inspection.model)).center_crop
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
    """The panels and Export of a rendered request, by output name (drawing and encoding pictures: run it in a
    worker thread); ``pages``: a document read page by page, every page's request's inspection (the panels show each
    page's request, row and picture, as before it was sent)."""
    spec = service.registry.get(request.model)
    serve = serve_command(spec, service.engines.model_path(spec) if spec.tiny else None)
    if request.each_page:  # one body per page
        split = [one for _, one in page_requests(request)]
        bodies = [chat_completions_body(one, spec) for one in split]
        rendered = [(one, found) for one, found in zip(split, pages, strict=False) if found is not None]
        view = pages_view(service, rendered) if rendered else panels(service, inspection, split[0])
        return {**view, "export_json": json.dumps(bodies, indent=1),
                "export_curl": serve + "\n\n# each page is its own request: request.json holds one body per page; "
                "send them together with the Python snippet",
                "export_py": pages_snippet(bodies, spec, replay_command(request))}
    body = chat_completions_body(request, spec)
    return {**panels(service, inspection, request),
            "export_json": json.dumps(body, indent=1),
            "export_curl": serve + "\n\n" + curl_command(spec),
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
            line += f" · {modality} sampling: {pairs(options)}"
    return line


@dataclasses.dataclass
class Boxes:
    """The boxes and points of one streaming answer, drawn on the picture they refer to (the conversation's last
    image), in its own pixels with the geometry the engine's processor reported."""

    grounding: Grounding
    """The family's box format."""
    image: Image.Image
    """The picture the boxes are drawn on."""
    expansion: Expansion
    """Its expansion (the processed size a format's pixels refer to)."""
    drawn: tuple[tuple[Any, ...], str | None] = ((), None)
    """The last items placed and their picture (drawn again only when they change)."""

    @classmethod
    def of(cls, spec: Any, request: ChatRequest, inspection: Inspection) -> Boxes | PageBoxes | None:
        """The answer's boxes where the family has a format and the conversation an image, else None; a document
        read page by page: each page's (``PageBoxes``)."""
        grounding = profile.adapter(spec).grounding
        if grounding is not None and request.each_page:
            return PageBoxes(grounding, tuple(page for page, _ in page_requests(request)))
        images = [picture(item) for item in request.items("image")]
        expansions = inspection.items.get("image", ())
        if grounding is None or not images or not expansions or images[-1] is None:
            return None
        return cls(grounding, images[-1], expansions[-1])

    def update(self, answer: str, pages: Sequence[PageFigures] = ()) -> tuple[tuple[str, ...], list[list[Any]]]:
        """The picture (a file; none without items) and the table rows for the answer so far."""
        placed = place(self.grounding.parse(answer), self.grounding, self.image.size, self.expansion.processed_size)
        if placed != self.drawn[0]:
            self.drawn = (placed, image_file(draw_boxes(self.image, placed), OVERLAYS) if placed else None)
        return (self.drawn[1],) if self.drawn[1] else (), box_rows(placed)


@dataclasses.dataclass
class PageBoxes:
    """The boxes of a document read page by page: each page's answer's, drawn on that page in its own pixels with
    the geometry its own request's render reported, as each answer streams; one table, each row's label after its
    page ("page 2: 3 Title")."""

    grounding: Grounding
    """The family's box format."""
    pages: tuple[Page, ...]
    """The pages asked, in page order (as ``page_requests`` splits the request)."""
    boxes: dict[int, Boxes] = dataclasses.field(default_factory=dict)
    """Each page's boxes, once its render is known."""

    def update(self, answer: str, pages: Sequence[PageFigures] = ()) -> tuple[tuple[str, ...], list[list[Any]]]:
        """The pictures of the pages with boxes so far, in page order, and the table rows of all pages."""
        figures: list[str] = []
        rows: list[list[Any]] = []
        for i, (page, part) in enumerate(zip(self.pages, pages, strict=False)):
            if part.vision is None or not part.answer:
                continue
            boxes = self.boxes.setdefault(i, Boxes(self.grounding, page.image, part.vision))
            drawn, table = boxes.update(part.answer)
            figures += drawn
            rows += [[f"page {page.number}: {row[0]}", *row[1:]] for row in table]
        return tuple(figures), rows


def _nth_frames(inspection: Inspection, index: int) -> tuple[Any, ...]:
    found = inspection.frames.get("video", ())
    return found[index] if index < len(found) else ()


def stats_data(stats: Stats | None, status: str, marks: dict[str, float] | None = None) -> dict[str, Any]:
    """The answer's figures as data (the ``stats_data`` output), with where the answer stands, and when done
    the ``marks``: wall-clock times (``time.time()``) at which the handler started, had read the message, got
    the render, had the panels, and yielded the first answer text (the benchmark's first-token steps)."""
    return {"status": status, **(dataclasses.asdict(stats) if stats else {}), **({"marks": marks} if marks else {})}


def stats_text(stats: Stats, stopped: bool = False) -> str:
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


def generating_text(stats: Stats) -> str:
    """The stats line while an answer streams: its tokens so far and their rate (at each streamed update)."""
    rate = f" · {stats.tokens_per_s:.1f} tokens/s" if stats.tokens_per_s else ""
    return f"generating… **{stats.tokens}** tokens{rate}"


def stats_of(done: Done) -> Stats:
    """The figures of a finished answer."""
    return Stats(tokens=done.num_tokens, ttft_s=done.ttft_s, tokens_per_s=done.tokens_per_s,
                 finish_reason=done.finish_reason, prompt_tokens=done.prompt_tokens, cached_tokens=done.cached_tokens,
                 reasoning_tokens=done.reasoning_tokens, wait_s=done.wait_s, pages=len(done.pages),
                 total_s=done.total_s)


def document_view(spec: Any, request: ChatRequest) -> Callable[[str, Sequence[PageFigures]], str]:
    """How the chat shows the answers of ``spec`` to ``request``, as a function of the answer and its pages' parts
    (a document read page by page): a reader's as the document it describes (its box format's ``document``; page
    by page, each page's part under its heading), else "" (the answer as it is)."""
    grounding = profile.adapter(spec).grounding if spec is not None else None
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


def waiting_text(event: Waiting) -> str:
    """The stats line while a question waits for its model's engine to start: how long it has waited since it was
    sent, and where the start stands."""
    return (f"waited {event.waited_s:.0f} s so far: waiting for the {event.model} engine to start: {event.phase} "
            "(the panels show vLLM's render already)")


def prefill_text(event: Prefilling) -> str:
    """The stats line while the engine prefills (no token yet): what it encodes and the seconds so far, after the
    wait for its start where there was one."""
    start = f"the engine's start {event.waited_s:.1f} s, then " if event.waited_s >= 0.05 else ""
    return f"{start}prefill: the engine encodes {event.what} · **{event.seconds:.0f} s** so far"


def rendered_text(service: ChatService, model: str, inspection: Inspection) -> str:
    """The stats line once the question is rendered: the engine's prefill begins (or, where the engine is not running
    yet, the wait for its start)."""
    spec = service.registry.get(model)
    if spec.remote or service.engines.running(spec) is not None:
        return f"prefill: the engine reads the {inspection.budget.total:,}-token prompt…"
    return sent_text(service, model)


def sent_text(service: ChatService, model: str) -> str:
    """The stats line the moment a question is sent: what happens now (its engine's start, where it is not running
    yet: the question waits for it; vLLM's renderer renders it meanwhile)."""
    spec = service.registry.get(model)
    if spec.remote or service.engines.running(spec) is not None:
        return "rendering the question with vLLM's renderer…"
    progress = service.engines.progress(model)
    return (f"waiting for the {model} engine to start: {progress.text() if progress else 'starting'} (vLLM's "
            "renderer renders the question meanwhile)")

