"""Benchmark: a document read page by page, through the page's own protocol, against ``vllm serve`` given the same
per-page requests.

    python -m bench.documents [--pages 40] [--max-tokens N] [--out docs]

In one run, on the tiny Qwen2.5-VL (``MODEL``), with a document this module writes itself (``make_document``: A4
pages of text, a table and a figure, as a word processor writes them; no file from outside):

1. rasterising: each page through the app's own intake (``vlm_demo.intake.load_document``, its page cache fresh so
   every page is drawn) at 72, 144 and 200 dpi: milliseconds per page and pixels;
2. the inspector: the PDF uploaded as the page uploads an attachment, then ``/inspect`` with each page on its own
   (the page's protocol: Gradio's queue and its server-sent events), on a warm engine: the time from the request to
   every page's row, the pages drawn by that request (as after attaching), and again with the pages kept;
3. reading page by page: the app (``bench/app_server.py``, ``ignore_eos``) asked through ``/chat`` with each page on
   its own, against ``vllm serve`` (``python -m vllm.entrypoints.openai.api_server`` with the app's engine
   arguments) given the same requests at once, one per page (each page's PNG at the same dpi, the same question,
   processor kwargs, sampling and ``max_tokens``; ``vlm_demo.export``'s bodies, the ones Export writes): time to the
   last page and pages/s on each side, and their ratio;
4. the browser: Debian's Chromium on the app's page, the PDF attached, "each page on its own" ticked, the question
   asked: the longest main-thread task while the pages stream (a ``PerformanceObserver`` of long tasks), and how many
   took over ``LONG_TASK_MS``.

Writes ``benchmark-documents.json`` into ``--out`` and the section ``HEADING`` of its ``benchmark.md`` (in place of
that section where it is there, else at the end; ``bench/report.py`` keeps it when it rewrites the file), and ends
with one line:

    RESULT doc_pages_per_s_vs_serve=R inspect_40_pages_s=S raster_ms_per_page_144=M longest_browser_task_ms=L
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/documents.py` from a fresh clone
    sys.path.insert(0, str(ROOT))

from bench.common import machine, pct  # noqa: E402
from bench.report import DOCUMENTS_HEADING  # noqa: E402

MODEL = "tiny-qwen2.5-vl"
"""The model read with: 4 images a prompt, 4096 tokens of context, a page at the page's default ``max_pixels``."""
QUESTION = "Read this page: its text, its table and its figure."
DPI = 144
"""The dpi the document is read at (the app's default where a family documents none)."""
RASTER_DPIS = (72, 144, 200)
WARM_DPI = 100
"""The warm-up reads two pages at this dpi: the engines warm, with no page of the measured read in any cache."""
HEADING = DOCUMENTS_HEADING
LONG_TASK_MS = 500
"""A browser task longer than this is a page that does not answer (issue 38's target)."""
INSPECT_TARGET_S = 2.0
"""Every page's cost shown within this of attaching (issue 38's target)."""
A4_PT = (595, 842)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- the document ------------------------------------------------------------------------------------------------

def _text(s: str) -> str:
    """A PDF string literal's contents."""
    return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def page_content(number: int, size_pt: tuple[int, int] = A4_PT) -> bytes:
    """Page ``number``'s drawing, as a word processor writes a report: a title and paragraphs of text (Helvetica,
    one of PDF's standard fonts), a table of 6 rows by 4 columns with ruled cells, and a figure: a bar chart with
    its axes and caption beside a picture (``/Im1``, ``page_image``)."""
    w, h = size_pt
    ops = ["BT /F2 18 Tf 50 %d Td (%s) Tj ET" % (h - 60, _text(f"Quarterly report - page {number}"))]
    ops.append("BT /F1 10 Tf 13 TL 50 %d Td" % (h - 90))
    for i in range(22):
        ops.append("(%s) Tj T*" % _text(f"Line {i + 1} of page {number}: revenue in region {(i * 7 + number) % 13} "
                                         f"grew by {(3 * i + number) % 40} percent (see table {number})."))
    ops.append("ET")
    top, cols, rows, cw, rh = h - 400, 4, 6, 120, 20
    ops.append("0.5 w 0 0 0 RG")
    for r in range(rows):
        for c in range(cols):
            x, y = 50 + cw * c, top - rh * (r + 1)
            ops.append(f"{x} {y} {cw} {rh} re S")
            label = (("Region", "Q1", "Q2", "Q3")[c] if r == 0 else f"R{r}" if c == 0
                     else f"{(r * c * 17 + number) % 997}")
            ops.append("BT /F%d 9 Tf %d %d Td (%s) Tj ET" % (2 if r == 0 else 1, x + 6, y + 6, _text(label)))
    base, left = 90, 60  # the figure: a bar chart, its axes, a caption, and a picture beside it
    ops.append(f"1 w {left} {base} m {left + 300} {base} l S {left} {base} m {left} {base + 150} l S")
    for i in range(8):
        height = 20 + (i * 37 + number * 11) % 120
        ops.append(f"{(40 + 25 * i) / 255:.3f} 0.353 0.706 rg {left + 10 + 36 * i} {base} 24 {height} re f")
    ops.append("0 0 0 rg BT /F1 9 Tf %d %d Td (%s) Tj ET" % (left, base - 20, _text(
        f"Figure {number}: sales by month, region {number % 13}.")))
    ops.append(f"q 160 0 0 120 {w - 220} {base} cm /Im1 Do Q")
    return "\n".join(ops).encode("latin-1")


def page_image(number: int, size: tuple[int, int] = (96, 72)) -> bytes:
    """The picture of page ``number``'s figure: RGB samples, a gradient and a diagonal, different on each page."""
    w, h = size
    out = bytearray()
    for y in range(h):
        for x in range(w):
            edge = abs(x * h - y * w) < w
            out += bytes((0, 0, 0) if edge else ((x * 255 // w + 13 * number) % 256, (y * 255 // h) % 256,
                                                 (97 * number) % 256))
    return bytes(out)


def make_document(path: Path, pages: int, size_pt: tuple[int, int] = A4_PT) -> Path:
    """A PDF of ``pages`` pages (``page_content``), written object by object with its cross-reference table; each
    page's content stream and picture Flate-compressed, as writers do."""
    w, h = size_pt
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",  # (the page tree, once the kids are known)
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>"]
    kids = []
    for n in range(1, pages + 1):
        content = zlib.compress(page_content(n, size_pt))
        picture = zlib.compress(page_image(n))
        first = len(objects) + 1
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(b"<< /Type /XObject /Subtype /Image /Width 96 /Height 72 /ColorSpace /DeviceRGB "
                       b"/BitsPerComponent 8 /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream"
                       % (len(picture), picture))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R /Resources << /Font "
                       b"<< /F1 3 0 R /F2 4 0 R >> /XObject << /Im1 %d 0 R >> >> >>" % (w, h, first, first + 1))
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (" ".join(f"{k} 0 R" for k in kids).encode(), pages)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


# -- 1. rasterising ----------------------------------------------------------------------------------------------

def rasterise(pdf: Path, pages: int, dpis: tuple[int, ...] = RASTER_DPIS) -> list[dict]:
    """Each page through the app's intake at each dpi, one page a call, the page cache fresh for each dpi (so every
    page is drawn: PDFium opens the document and draws the page, as the app does on a page's first use)."""
    from vlm_demo.intake import documents
    from vlm_demo.intake.cache import Recent
    from vlm_demo.settings import DOCUMENT_PAGES_KEPT, Settings

    settings = Settings.from_env()
    documents.load_document(pdf, settings, documents.DocumentOptions(dpi=72, pages="1"))  # (the outline, PDFium)
    rows = []
    for dpi in dpis:
        documents._PAGES = Recent(DOCUMENT_PAGES_KEPT)  # nothing drawn yet at any dpi
        times, size = [], (0, 0)
        for n in range(1, pages + 1):
            t0 = time.perf_counter()
            (page,) = documents.load_document(pdf, settings, documents.DocumentOptions(dpi=dpi, pages=str(n)))
            times.append(time.perf_counter() - t0)
            size = page.image.size
        rows.append({"dpi": dpi, "size": list(size), "pixels": size[0] * size[1], "pages": pages,
                     "ms_per_page": 1000 * statistics.mean(times), "ms_p50": 1000 * pct(times, 50),
                     "ms_p95": 1000 * pct(times, 95)})
        log(f"  {dpi} dpi: {size[0]}x{size[1]} px, {rows[-1]['ms_per_page']:.1f} ms a page")
    documents._PAGES = Recent(DOCUMENT_PAGES_KEPT)
    return rows


# -- 2, 3. the page's protocol -----------------------------------------------------------------------------------

async def _completed(client, page, session: str, fn_index: int, data: list[Any]) -> list[Any]:
    """One queued event of the page, its outputs once completed (``RuntimeError`` where it failed)."""
    from bench.browser_load import join, messages

    event = await join(client, page, session, fn_index, data)
    async for msg in messages(client, page, session):
        if msg.get("event_id") == event and msg.get("msg") == "process_completed":
            if not msg.get("success", True):
                raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
            return msg["output"]["data"]
    raise RuntimeError("the event's stream ended before it completed")


async def inspect_document(url: str, pdf: Path, pages: int) -> dict:
    """``/inspect`` with each page on its own, as the page sends it: the PDF uploaded first (the page uploads an
    attachment when it is attached), then the request; its time to every page's row, twice: the pages drawn by
    the request (the first after attaching) and kept (the next, a control moved and back, say)."""
    import httpx

    from bench.browser_load import Page
    from vlm_demo.ui.contract import named_outputs

    page = Page(url, MODEL, str(pdf), 0, api_name="inspect", question=QUESTION,
                controls={"each_page": True, "dpi": DPI})
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        for key in ("drawn", "kept"):
            session = uuid.uuid4().hex[:11]
            t0 = time.perf_counter()
            data = await page.question(client)
            t1 = time.perf_counter()
            outputs = await _completed(client, page, session, page.fn_index, data)
            t2 = time.perf_counter()
            rows = named_outputs("inspect", outputs)["table"]["data"]
            labels = [row[0] for row in rows]
            if labels != [f"page {n} of {pdf.name}" for n in range(1, pages + 1)]:
                raise RuntimeError(f"/inspect showed {labels[:3]}... ({len(labels)} rows), not the {pages} pages")
            out[f"upload_{key}_s"], out[f"inspect_{key}_s"] = t1 - t0, t2 - t1
            out["tokens_per_page"] = [row[2] for row in rows]
    return out


async def read_in_app(url: str, pdf: Path, pages: int, max_tokens: int, dpi: int = DPI,
                      page_range: str = "") -> dict:
    """The document asked page by page through ``/chat`` in a new tab, as the page sends it (the PDF uploaded
    first, the question then; the page's own events on the render beside it): time from the request to the last
    page's last token, and the app's own figures (``stats_data``)."""
    import httpx

    from bench.browser_load import Page, answer
    from vlm_demo.ui.contract import CHAT_OUTPUTS, named_outputs

    page = Page(url, MODEL, str(pdf), max_tokens, question=QUESTION,
                controls={"each_page": True, "dpi": dpi, "pages": page_range})
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    async with httpx.AsyncClient(timeout=900, limits=limits, trust_env=False) as client:
        t0 = time.perf_counter()
        data = await page.question(client)
        t1 = time.perf_counter()
        ttft, outputs = await answer(client, page, uuid.uuid4().hex[:11], data)
        t2 = time.perf_counter()
    stats = named_outputs("chat", outputs[:len(CHAT_OUTPUTS)])["stats_data"]
    if not isinstance(stats, dict) or stats.get("status") != "done" or stats.get("pages") != pages:
        raise RuntimeError(f"the document's answer did not finish with {pages} pages: {stats!r}")
    if stats["tokens"] != pages * max_tokens:
        raise RuntimeError(f"{stats['tokens']} tokens, not {pages} x {max_tokens} (ignore_eos)")
    return {"pages": pages, "tokens": stats["tokens"], "upload_s": t1 - t0, "last_page_s": t2 - t1,
            "first_text_s": ttft, "app_total_s": stats.get("total_s"), "prompt_tokens": stats.get("prompt_tokens")}


# -- 3. vllm serve -----------------------------------------------------------------------------------------------

def serve_bodies(pdf: Path, pages: int, max_tokens: int, allowed: list[int] | None, dpi: int = DPI,
                 page_range: str = "") -> list[dict]:
    """The requests the app sends for each page, as ``vllm serve`` takes them (``vlm_demo.export``'s bodies, what
    Export writes for a document read page by page): the page's PNG at ``dpi``, the question, the page's processor
    kwargs where no control moved, the app's sampling with ``ignore_eos``, the usage in the last chunk, and the
    printable tokens where the app samples those alone."""
    from vlm_demo.engine.openai_request import USAGE
    from vlm_demo.export import chat_completions_body
    from vlm_demo.intake import DocumentOptions, load_document
    from vlm_demo.profile import load_registry, resolve
    from vlm_demo.registry import Sampling
    from vlm_demo.service import ChatRequest, Turn
    from vlm_demo.settings import Settings

    settings = Settings.from_env()
    spec = load_registry(settings.models_file).get(MODEL)
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True)
    bodies = []
    for page in load_document(pdf, settings, DocumentOptions(dpi=dpi, pages=page_range)):
        request = ChatRequest(MODEL, (Turn("user", QUESTION, {"image": (page,)}),),
                              mm_kwargs=resolve(spec).default_mm_kwargs(), sampling=sampling)
        body = chat_completions_body(request, spec) | USAGE | {"model": MODEL}
        if allowed is not None:
            body["allowed_token_ids"] = allowed
        bodies.append(body)
    if len(bodies) != pages:
        raise RuntimeError(f"{len(bodies)} requests for {pages} pages")
    return bodies


async def _ask_serve(client, body: dict, t0: float) -> dict:
    """One page's streamed answer: when its first text and its end came (seconds from ``t0``), its usage."""
    first, usage = 0.0, {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if not first and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
                first = time.perf_counter() - t0
            usage = chunk.get("usage") or usage
    return {"first_s": first, "done_s": time.perf_counter() - t0, "tokens": usage.get("completion_tokens", 0),
            "prompt_tokens": usage.get("prompt_tokens", 0)}


async def read_with_serve(url: str, bodies: list[dict]) -> dict:
    """Every page's request sent at once, as the app sends them: time to the last page's last token."""
    import httpx

    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits, trust_env=False) as client:
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(_ask_serve(client, body, t0) for body in bodies))
    return {"pages": len(bodies), "tokens": sum(a["tokens"] for a in answers),
            "last_page_s": max(a["done_s"] for a in answers), "first_text_s": min(a["first_s"] for a in answers),
            "prompt_tokens": sum(a["prompt_tokens"] for a in answers)}


# -- 4. the browser ----------------------------------------------------------------------------------------------

def browser_read(url: str, pdf: Path, pages: int, timeout_s: float) -> dict:
    """Chromium on the page: the PDF attached, each page on its own ticked (the panels list every page), the
    question asked; the main thread's long tasks from Enter until the stats line says the last page is done, and
    from attaching until the panels settled."""
    import re

    from tests.browser import OBSERVE_JS, chromium

    def tasks_since(page, start: float) -> list[float]:
        return [t["ms"] for t in page.evaluate("window.longTasks || []") if t["start"] >= start]
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(url)
        page.evaluate(OBSERVE_JS)
        page.locator("#question textarea").wait_for(timeout=60_000)
        attached = page.evaluate("performance.now()")
        page.locator("#question input[type=file]").set_input_files([str(pdf)])
        page.wait_for_function("() => document.querySelectorAll('#question img, #question .thumbnail-item').length",
                               timeout=30_000)
        page.locator("#slider-each_page input[type=checkbox]").click()
        page.wait_for_timeout(300)
        page.wait_for_function("() => /each page is its own request/.test(document.querySelector("
                               "'#rendered-prompt').innerText) && !document.querySelector('#rendered-prompt "
                               ".wrap.translucent')", timeout=120_000)
        attach_tasks = tasks_since(page, attached)
        box = page.locator("#question textarea")
        box.fill(QUESTION)
        asked = page.evaluate("performance.now()")
        t0 = time.perf_counter()
        box.press("Enter")
        page.wait_for_function("() => /pages, each on its own: the last done/.test(document.querySelector("
                               "'#stats').innerText)", timeout=timeout_s * 1000)
        wall = time.perf_counter() - t0
        stats = page.locator("#stats").inner_text()
        streaming = tasks_since(page, asked)
    shown = re.search(r"(\d+) pages, each on its own: the last done at ([\d.]+) s, ([\d.]+) pages/s", stats)
    if not shown or int(shown[1]) != pages:
        raise RuntimeError(f"the page's stats line does not say {pages} pages were read: {stats!r}")
    return {"longest_task_ms": max(streaming, default=0.0),
            "tasks_over_limit": sum(t > LONG_TASK_MS for t in streaming),
            "long_tasks": len(streaming), "attach_longest_task_ms": max(attach_tasks, default=0.0),
            "enter_to_done_s": wall, "shown_pages_per_s": float(shown[3])}


# -- the run -----------------------------------------------------------------------------------------------------

def headline(data: dict) -> dict:
    app, serve = data["app"], data["serve"]
    raster = next(r for r in data["rasterising"] if r["dpi"] == 144)
    app_rate, serve_rate = app["pages"] / app["last_page_s"], serve["pages"] / serve["last_page_s"]
    return {"doc_pages_per_s_vs_serve": app_rate / serve_rate, "app_pages_per_s": app_rate,
            "serve_pages_per_s": serve_rate, "inspect_40_pages_s": data["inspect"]["inspect_drawn_s"],
            "raster_ms_per_page_144": raster["ms_per_page"],
            "longest_browser_task_ms": data["browser"]["longest_task_ms"]}


def result_line(h: dict) -> str:
    return (f"RESULT doc_pages_per_s_vs_serve={h['doc_pages_per_s_vs_serve']:.2f} "
            f"inspect_40_pages_s={h['inspect_40_pages_s']:.2f} "
            f"raster_ms_per_page_144={h['raster_ms_per_page_144']:.1f} "
            f"longest_browser_task_ms={h['longest_browser_task_ms']:.0f}")


def section(data: dict) -> str:
    """``benchmark.md``'s section for the run: how it was run, its RESULT line, the targets, its figures."""
    h, m, app, serve, insp, br = (data["headline"], data["machine"], data["app"], data["serve"], data["inspect"],
                                  data["browser"])
    n, tokens = data["pages"], data["max_tokens"]
    command = "python -m bench.documents" + ("" if n == 40 else f" --pages {n}") + (
        "" if tokens == DEFAULT_MAX_TOKENS else f" --max-tokens {tokens}")
    per_page = sorted(set(insp["tokens_per_page"]))
    lines = [
        HEADING, "",
        f"`{command}`, {data['started']}, {data['duration_s']:.0f} s. Machine: **{m['cpu']}, {m['cores']} cores, "
        f"{m['memory_gib']} GiB**, Python {m['python']}, CPU only (vLLM CPU build). Load average (1/5/15 min) at the "
        f"start {' / '.join(map(str, m['load_average']))}, at the end "
        f"{' / '.join(map(str, data['load_average_end']))}.",
        "",
        f"The document: {n} A4 pages written by `bench/documents.py` (each a title and 22 lines of text in Helvetica, "
        f"a ruled table of 6 x 4 cells, a bar chart with its axes and caption, and a 96 x 72 picture; "
        f"{data['pdf_bytes']:,} bytes). Read with {MODEL} at {DPI} dpi, each page on its own (one request a page, all "
        f"sent together), \"{QUESTION}\", `max_tokens={tokens}` with `ignore_eos`, temperature 0.7, top_p 0.9; each "
        f"page {' or '.join(map(str, per_page))} image tokens (the page's default `max_pixels`). The app: "
        "`bench/app_server.py`, asked through `/chat` as the page asks (Gradio's queue, its server-sent events read as "
        "they arrive, the page's own events on the render beside it), the PDF uploaded before (as on attaching); "
        "vllm serve: its OpenAI server with the app's engine arguments, sent the same requests at once "
        "(`vlm_demo.export`'s bodies: each page's PNG at the same dpi, the same processor kwargs, sampling and "
        "printable tokens). Both after a two-page warm-up at another dpi, so no measured page is in an engine's "
        "cache (the app's pages are kept from the inspection before, as a person inspects, then asks).", "",
        "```", result_line(h), "```", "",
        "Targets: every page's cost within " + f"{INSPECT_TARGET_S:g} s of attaching: {h['inspect_40_pages_s']:.2f} s, "
        f"**{'met' if h['inspect_40_pages_s'] <= INSPECT_TARGET_S else 'not met'}**; no browser task over "
        f"{LONG_TASK_MS} ms while the pages stream: longest {h['longest_browser_task_ms']:.0f} ms, "
        f"{br['tasks_over_limit']} over, **{'met' if br['tasks_over_limit'] == 0 else 'not met'}**.", "",
        "| path | pages | time to the last page (s) | pages/s | tokens/s | first text (s) | prompt tokens |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("app: page protocol (`/chat`, each page on its own)", app),
                    ("vllm serve (OpenAI server), one request a page", serve)):
        lines.append(f"| {name} | {r['pages']} | {r['last_page_s']:.2f} | {r['pages'] / r['last_page_s']:.2f} | "
                     f"{r['tokens'] / r['last_page_s']:.0f} | {r['first_text_s']:.2f} | {r['prompt_tokens']:,} |")
    lines += ["", f"App / vllm serve: **{h['doc_pages_per_s_vs_serve']:.2f}** of the pages/s. The app's own figure "
              f"for the read (its stats line): {app['app_total_s']:.2f} s to the last page. The PDF's upload before "
              f"the question: {1000 * app['upload_s']:.0f} ms.", "",
              "| rasterising (`vlm_demo.intake.load_document`, one page a call) | page (px) | pixels | ms a page "
              "(mean) | p50 | p95 |", "|---|---:|---:|---:|---:|---:|"]
    for r in data["rasterising"]:
        lines.append(f"| {r['dpi']} dpi, {r['pages']} pages | {r['size'][0]} x {r['size'][1]} | "
                     f"{r['pixels'] / 1e6:.2f} M | {r['ms_per_page']:.1f} | {r['ms_p50']:.1f} | {r['ms_p95']:.1f} |")
    lines += ["", "| the inspector (`/inspect`, each page on its own, warm engine) | upload (ms) | request to every "
              "page's row (s) |", "|---|---:|---:|",
              f"| the pages drawn by the request (after attaching) | {1000 * insp['upload_drawn_s']:.0f} | "
              f"{insp['inspect_drawn_s']:.2f} |",
              f"| the pages kept (asked again) | {1000 * insp['upload_kept_s']:.0f} | {insp['inspect_kept_s']:.2f} |",
              "", f"The browser (Chromium, headless, 1600 x 1000): while the {n} pages streamed, "
              f"{br['long_tasks']} main-thread tasks over 50 ms, the longest {br['longest_task_ms']:.0f} ms, "
              f"{br['tasks_over_limit']} over {LONG_TASK_MS} ms; Enter to the stats line's last page "
              f"{br['enter_to_done_s']:.1f} s ({br['shown_pages_per_s']:.2f} pages/s on the stats line; the browser's "
              f"own work shares the cores). From attaching the PDF to the panels listing every page (each page on its "
              f"own ticked), the longest task {br['attach_longest_task_ms']:.0f} ms.", ""]
    return "\n".join(lines)


def write(data: dict, out_dir: Path) -> None:
    """``benchmark-documents.json`` and the section of ``benchmark.md`` in ``out_dir``."""
    from bench.report import with_section

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "benchmark-documents.json").write_text(json.dumps(data, indent=1) + "\n")
    table = out_dir / "benchmark.md"
    text = table.read_text() if table.exists() else ""
    table.write_text(with_section(text, HEADING, section(data)))


DEFAULT_MAX_TOKENS = 256
"""Tokens a page: a page's transcription is hundreds of tokens (``bench/run.py``'s answers are as long)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=40, help="pages of the document (default 40; at most the app's "
                   "max-pages setting)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens a page (ignore_eos; "
                   f"default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="where benchmark.md and "
                   "benchmark-documents.json are (default docs/)")
    args = p.parse_args(argv)
    if not 2 <= args.pages <= 40:
        p.error("--pages: 2 to 40 (the app reads at most 40 pages of a document)")
    from bench.run import AppServer, ServeServer

    started = time.perf_counter()
    data: dict[str, Any] = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                            "pages": args.pages, "max_tokens": args.max_tokens, "dpi": DPI, "model": MODEL}
    log(f"bench.documents: {args.pages} pages, {args.max_tokens} tokens a page, on {data['machine']}")
    with tempfile.TemporaryDirectory(prefix="vlm-bench-documents-") as tmp:
        work = Path(tmp)
        pdf = make_document(work / "report.pdf", args.pages)
        data["pdf_bytes"] = pdf.stat().st_size
        log("[rasterising]")
        data["rasterising"] = rasterise(pdf, args.pages)
        from vlm_demo.settings import Settings

        log("[app] bench/app_server.py")
        server = AppServer(MODEL, Settings.from_env().ui_update_interval_s, work)
        try:
            data["engine_start_s"] = server.load_model(MODEL)
            asyncio.run(read_in_app(server.url, pdf, 2, 4, WARM_DPI, "1-2"))  # warm-up
            data["inspect"] = asyncio.run(inspect_document(server.url, pdf, args.pages))
            log(f"  /inspect, {args.pages} pages: {data['inspect']['inspect_drawn_s']:.2f} s (pages drawn), "
                f"{data['inspect']['inspect_kept_s']:.2f} s (kept)")
            data["app"] = asyncio.run(read_in_app(server.url, pdf, args.pages, args.max_tokens))
            log(f"  /chat, each page on its own: last page at {data['app']['last_page_s']:.2f} s")
            data["browser"] = browser_read(server.url, pdf, args.pages, timeout_s=600)
            log(f"  browser: longest task {data['browser']['longest_task_ms']:.0f} ms while the pages streamed")
        finally:
            server.close()
        log("[vllm serve]")
        peer = ServeServer(MODEL, work)
        try:
            allowed = json.loads(peer.allowed.read_text()) if peer.allowed.exists() else None
            asyncio.run(read_with_serve(peer.server.url, serve_bodies(pdf, 2, 4, allowed, WARM_DPI, "1-2")))
            bodies = serve_bodies(pdf, args.pages, args.max_tokens, allowed)
            data["serve"] = asyncio.run(read_with_serve(peer.server.url, bodies))
            log(f"  {args.pages} requests at once: last page at {data['serve']['last_page_s']:.2f} s")
        finally:
            peer.close()
    if data["serve"]["tokens"] != args.pages * args.max_tokens:
        raise RuntimeError(f"vllm serve generated {data['serve']['tokens']} tokens, not {args.pages} x "
                           f"{args.max_tokens}")
    if data["serve"]["prompt_tokens"] != data["app"]["prompt_tokens"]:  # the same requests, to the token
        raise RuntimeError(f"prompt tokens differ: the app's pages {data['app']['prompt_tokens']}, vllm serve's "
                           f"{data['serve']['prompt_tokens']}")
    data["duration_s"] = round(time.perf_counter() - started, 1)
    data["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    data["headline"] = headline(data)
    write(data, args.out)
    log(f"bench.documents: wrote {args.out}/benchmark.md ({HEADING[3:]}) and benchmark-documents.json in "
        f"{data['duration_s']:.0f} s")
    print(result_line(data["headline"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
