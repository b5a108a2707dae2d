"""Documents (issue 38): a PDF becomes the pages a request names, rasterised at its DPI, each page an image to vLLM
whose cost the inspector lists under the page's name; bad documents are one line each. Rendered with vLLM's renderer
without an engine (only counts and ids are compared)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time

import pytest

from vlm_demo import intake
from vlm_demo.errors import InputError
from vlm_demo.intake import DocumentOptions, Page, load_document, page_ranges
from vlm_demo.intake.documents import page_numbers
from vlm_demo.intake import documents as documents_module
from vlm_demo.inspector import to_json
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, Delta, Done, Figures, Rendered, Turn
from vlm_demo.settings import Settings
from vlm_demo.ui.chat_request import read_message
from vlm_demo.ui.panels import documents_text, image_table

from .conftest import run_cli
from .documents import ENCRYPTED, HUGE_PAGE, NO_PAGES, make_pdf, many_pages


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return make_pdf(tmp_path_factory.mktemp("documents") / "report.pdf", pages=3)


def test_pages_are_rasterised_at_the_dpi_with_their_names(report):
    pages = load_document(report, Settings(), DocumentOptions(dpi=144))
    assert [p.number for p in pages] == [1, 2, 3]
    assert all(p.source == "report.pdf" and p.page_count == 3 and p.dpi == 144 for p in pages)
    assert pages[0].size_pt == (595.0, 842.0)
    assert pages[0].image.size == (1190, 1684) and pages[0].image.mode == "RGB"  # 595 x 842 pt at 2 px a point
    assert pages[0].label == "page 1 of report.pdf"
    (small,) = load_document(report, Settings(), DocumentOptions(dpi=72, pages="2"))
    assert small.number == 2 and small.image.size == (595, 842)
    assert small.image.getpixel((5, 5)) == (255, 255, 255)  # white paper
    assert len(set(small.image.getdata())) > 2  # and something drawn on it


def test_a_page_is_rasterised_once_per_dpi(report, monkeypatch):
    drawn = []
    draw = documents_module._draw
    monkeypatch.setattr(documents_module, "_draw", lambda *a: drawn.append(a[1:3]) or draw(*a))
    first = load_document(report, Settings(), DocumentOptions(dpi=101, pages="1-2"))
    again = load_document(report, Settings(), DocumentOptions(dpi=101, pages="2,1"))
    assert [p.image for p in again] == [first[1].image, first[0].image]  # kept, not drawn again
    load_document(report, Settings(), DocumentOptions(dpi=102, pages="1"))
    assert drawn == [(1, 101), (2, 101), (1, 102)]


@pytest.mark.parametrize(("text", "count", "limit", "expected"), [
    ("", 3, 40, (1, 2, 3)), ("", 50, 40, tuple(range(1, 41))), ("1-3,7", 8, 40, (1, 2, 3, 7)),
    (" 2 - 3 , 1 ", 3, 40, (2, 3, 1)), ("2,2,1-2", 3, 40, (2, 1)), ("4", 4, 40, (4,))])
def test_page_ranges_read_as_people_write_them(text, count, limit, expected):
    assert page_numbers(text, count, limit, "doc.pdf") == expected
    assert page_numbers(page_ranges(expected), count, limit, "doc.pdf") == expected  # written back, read again


@pytest.mark.parametrize(("text", "message"), [
    ("0", "a range goes from page 1 up"), ("3-1", "a range goes from page 1 up"), ("9", "page 9 is outside the "
     "document (3 pages)"), ("1-4", "page 4 is outside"), ("one", "write pages as 1-3,7"), ("1;2", "write pages as"),
    ("1-3,,", "write pages as")])
def test_a_page_range_outside_the_document_is_one_line(report, text, message):
    with pytest.raises(InputError, match=f"^report.pdf: .*{re.escape(message)}"):
        load_document(report, Settings(), DocumentOptions(pages=text))


@pytest.mark.parametrize(("data", "settings", "options", "message"), [
    (ENCRYPTED, Settings(), DocumentOptions(), "doc.pdf: the PDF is encrypted"),
    (NO_PAGES, Settings(), DocumentOptions(), "doc.pdf: not a readable PDF .*with no pages"),
    (b"%PDF-1.4\n1 0 obj <<", Settings(), DocumentOptions(), "doc.pdf: not a readable PDF .*truncated"),
    (b"GIF89a not a pdf", Settings(), DocumentOptions(), "doc.pdf: not a PDF"),
    (HUGE_PAGE, Settings(), DocumentOptions(dpi=72), "page 1 at 72 dpi is 14400x14400 px; the limit is 40,000,000 "
     "pixels .*200 x 200 inch page is too large at any dpi"),
    (many_pages(3), Settings(max_document_page_count=2), DocumentOptions(), "3 pages; the limit is 2 pages"),
    (many_pages(3), Settings(max_document_pages=2), DocumentOptions(pages="1-3"), "name more than 2 pages"),
    (many_pages(2), Settings(max_upload_bytes=100), DocumentOptions(), "file is larger than 100 bytes"),
    (many_pages(1), Settings(), DocumentOptions(dpi=500), "dpi must be a whole number in 72..300"),
])
def test_bad_documents_are_one_line_each(data, settings, options, message):
    with pytest.raises(InputError, match=message) as caught:
        load_document(data, settings, options, name="doc.pdf")
    assert "\n" not in str(caught.value)


def test_a_ten_thousand_page_file_is_refused_before_any_page_is_read():
    with pytest.raises(InputError, match="^big.pdf: 10,000 pages; the limit is 2,000 pages per document$"):
        load_document(many_pages(10_000), Settings(), name="big.pdf")


def test_all_pages_by_default_up_to_the_max_pages_setting():
    pages = load_document(many_pages(5), Settings(max_document_pages=3), DocumentOptions(dpi=72), name="five.pdf")
    assert [(p.number, p.page_count) for p in pages] == [(1, 5), (2, 5), (3, 5)]


async def test_the_message_reads_a_pdf_as_its_pages(report, tmp_path):
    picture = tmp_path / "photo.png"
    from .conftest import make_image
    make_image(64, 48).save(picture)
    message = {"text": "Read these.", "files": [str(picture), str(report)]}
    turn, shown = await read_message(message, "", Settings(), DocumentOptions(dpi=72, pages="1,3"))
    images = turn.media["image"]
    assert [isinstance(i, Page) for i in images] == [False, True, True]
    assert [p.number for p in images[1:]] == [1, 3]
    assert "[document: report.pdf, pages 1,3 of 3 at 72 dpi; page 1 shown]" in shown[-1]
    assert len(shown) == 3  # the photo, the document's first page, the text


async def test_each_page_costs_what_the_same_picture_costs(service, report):
    """The inspector lists every page under its document's name, with the rasterised size and DPI, and each page's
    count is vLLM's for that very picture sent as an image."""
    pages = load_document(report, Settings(), DocumentOptions(dpi=100))
    sampling = Sampling(temperature=0.0, max_tokens=8)
    as_pages = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),), sampling=sampling)
    as_pictures = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": tuple(p.image for p in pages)}),),
                              sampling=sampling)
    found = await service.inspect(as_pages, start_engine=False)
    plain = await service.inspect(as_pictures, start_engine=False)
    assert found.prompt_token_ids == plain.prompt_token_ids  # a page is a picture to vLLM
    images = to_json(found)["images"]
    assert [(i["source"], i["page"], i["dpi"], i["orig_size"]) for i in images] == [
        ("report.pdf", n, 100, [827, 1170]) for n in (1, 2, 3)]  # 595 x 842 pt, drawn whole
    assert [i["count"] for i in images] == [e.count for e in plain.items["image"]]
    assert [row[0] for row in image_table(found)] == ["page 1 of report.pdf", "page 2 of report.pdf",
                                                     "page 3 of report.pdf"]
    assert "827x1170 at 100 dpi" in image_table(found)[0][4]
    tokens = sum(e.length for e in found.items["image"])
    assert documents_text(found) == (f"report.pdf: 3 pages at 100 dpi, {tokens:,} tokens, "
                                     f"{100 * tokens / found.budget.max_model_len:.1f}% of the context")
    assert all(i["source"] is None for i in to_json(plain)["images"])


async def test_the_panels_name_the_pages_that_do_not_fit(service, tmp_path):
    """Before anything is sent: all pages in one request name the pages past the context's end (those whose range
    ends beyond max_model_len, by vLLM's render), each page on its own names none where every request fits."""
    from vlm_demo.service import page_requests
    from vlm_demo.ui.panels import budget_html, pages_view

    pages = load_document(make_pdf(tmp_path / "long.pdf", pages=4), Settings(), DocumentOptions(dpi=200))
    request = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),),
                          mm_kwargs={"max_pixels": 1003520})
    found = await service.inspect(request, start_engine=False)
    window = found.budget.max_model_len
    past = [e.page for e in found.items["image"] if e.offset + e.length > window]
    assert past == [4], [(e.offset, e.length) for e in found.items["image"]]  # 1260 positions a page (1258 tokens), 4096 in all
    assert documents_text(found).endswith("; page 4 does not fit: the context ends at 4,096 tokens (read them page "
                                          "by page, or fewer pages, or a lower dpi)")
    assert "no room for an answer (1,017 over the context): it cannot be sent" in budget_html(found)  # 5,113 tokens
    split = [(one, await service.inspect(one, start_engine=False)) for _, one in page_requests(request)]
    budget = pages_view(service, split)["budget"]
    assert "4 pages, 5,040 tokens in all; each request 1,327 of 4,096 tokens at most<" in budget  # none over


async def test_more_pages_than_the_model_takes_says_choose_fewer(service, report):
    pages = load_document(report, Settings(), DocumentOptions(dpi=72)) * 2  # 6 pages; the tiny entry takes 4
    request = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),))
    with pytest.raises(InputError, match="^6 images in one message \\(6 of them document pages\\); tiny-qwen2.5-vl "
                       "takes at most 4 per prompt: choose fewer pages$"):
        await service.inspect(request, start_engine=False)


async def test_a_checked_attachment_draws_no_page(report, monkeypatch):
    monkeypatch.setattr(documents_module, "_draw", lambda *a: pytest.fail("a page was drawn"))
    await intake.check_file(report, Settings(), name="report.pdf")
    with pytest.raises(InputError, match="^x.pdf: the PDF is encrypted"):
        path = report.parent / "x.pdf"
        path.write_bytes(ENCRYPTED)
        await intake.check_file(path, Settings(), name="x.pdf")


def test_cli_inspect_json_lists_each_page(report):
    out = run_cli("inspect", "--model", "tiny-qwen2.5-vl", "--image",
                          str(report), "--pages", "2-3", "--dpi", "90", "--text", "Read it.", "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    images = json.loads(out.stdout)["images"]
    assert [(i["source"], i["page"], i["dpi"], i["orig_size"]) for i in images] == [
        ("report.pdf", 2, 90, [744, 1053]), ("report.pdf", 3, 90, [744, 1053])]
    bad = run_cli("inspect", "--model", "tiny-qwen2.5-vl", "--image",
                          str(report), "--pages", "5", "--text", "Read it.", timeout=300)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
        "error: report.pdf: page 5 is outside the document (3 pages)")
    assert "Traceback" not in bad.stderr


def test_pages_keep_their_type_through_intake(report):
    assert isinstance(load_document(report, Settings(), DocumentOptions(dpi=72, pages="1"))[0], Page)
    assert intake.picture(load_document(report, Settings(), DocumentOptions(dpi=72, pages="1"))[0]).size == (595, 842)


async def test_a_page_whose_stream_raises_ends_the_document_with_the_error(report):
    """A page's stream that raises (a bug, not a page's ``Failed``: ``bench/app_server.py``'s service once took no
    positional arguments) ends the document's stream with that error, its other pages closed, instead of leaving it
    waiting for that page forever."""
    from vlm_demo.service.pages import each_page

    pages = load_document(report, Settings(), DocumentOptions(dpi=72))
    ask = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),), each_page=True)
    closed = []

    async def one_page(request):
        page = request.turns[-1].media["image"][-1]
        if page.number == 2:
            raise TypeError("chat() takes 2 positional arguments but 4 were given")
        try:
            yield Delta("", "…", Figures(1))
            await asyncio.sleep(30)
        finally:
            closed.append(page.number)
    t0 = time.perf_counter()
    with pytest.raises(TypeError, match="positional arguments"):
        await asyncio.wait_for(_drain(each_page(ask, one_page)), 10)
    assert time.perf_counter() - t0 < 5, "the document waited for the failed page (until cancelled)"
    assert sorted(closed) == [1, 3]


async def _drain(stream) -> list:
    return [event async for event in stream]


@pytest.mark.engine
async def test_each_page_on_its_own_answers_every_page_in_order_and_stops_together(service, engines, report):
    """Six pages (the tiny entry takes 4 images a prompt): one request a page, sent together; the answer holds each
    page's part in page order with its figures; closing the stream mid-answer aborts every page's request."""
    pages = load_document(report, Settings(), DocumentOptions(dpi=72)) * 2
    ask = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),),
                      sampling=Sampling(temperature=0.0, max_tokens=8, ignore_eos=True), each_page=True)
    events = [event async for event in service.chat(ask)]
    done = events[-1]
    assert isinstance(done, Done), events[-1]
    labels = [f"page {n} of report.pdf" for n in (1, 2, 3, 1, 2, 3)]
    assert [p.label for p in done.pages] == labels and all(p.figures.tokens == 8 and not p.failed for p in done.pages)
    assert done.figures.tokens == 48 and done.figures.total_s >= max(p.done_s for p in done.pages) > 0
    assert re.findall(r"\*\*(page \d of report\.pdf)\*\*", done.answer) == labels  # each part, in page order
    (rendered,) = [e for e in events if isinstance(e, Rendered)]  # one, once every page's request has rendered
    assert [e.page for e in rendered.inspection.items["image"]] == [1]  # the first page's, as its own request
    assert [i.items["image"][-1].page for i in rendered.pages] == [1, 2, 3, 1, 2, 3]  # and each page's own
    assert all(len(i.items["image"]) == 1 for i in rendered.pages)
    assert events.index(rendered) < min(i for i, e in enumerate(events) if isinstance(e, Delta))
    assert done.figures.prompt_tokens == 6 * len(rendered.rendered.prompt_token_ids)  # six requests of one page each
    long = dataclasses.replace(ask, sampling=Sampling(temperature=0.0, max_tokens=2048, ignore_eos=True))
    stream = service.chat(long)
    async for event in stream:
        if isinstance(event, Delta) and event.figures.tokens >= 12:
            break
    assert engines.running_requests() == 6
    await stream.aclose()
    for _ in range(40):
        if engines.running_requests() == 0:
            break
        await asyncio.sleep(0.05)
    assert engines.running_requests() == 0, "a page's request outlived Stop"


@pytest.mark.engine
def test_cli_chat_each_page(report):
    out = run_cli("chat", "--model", "tiny-qwen2.5-vl", "--image",
                          str(report), "--pages", "1,3", "--dpi", "72", "--each-page", "--max-tokens", "4",
                          "--text", "Read it.", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout)
    assert [p["label"] for p in found["pages"]] == ["page 1 of report.pdf", "page 3 of report.pdf"]
    assert found["num_tokens"] == sum(p["tokens"] for p in found["pages"]) and found["total_s"] > 0
    assert "Traceback" not in out.stderr


async def test_a_document_read_page_by_page_exports_one_request_per_page(service, report):
    """Export of a page-by-page answer: request.json holds one body per page (each with its page alone), the Python
    snippet sends them together and runs as written, and names the command line that asks the same."""
    from vlm_demo.service import page_requests
    from vlm_demo.ui.panels import export_view, rendered_view

    pages = load_document(report, Settings(), DocumentOptions(dpi=72, pages="1,3"))
    request = ChatRequest("tiny-qwen2.5-vl", (Turn("user", "Read it.", {"image": pages}),),
                          sampling=Sampling(temperature=0.0, max_tokens=8), each_page=True)
    first = page_requests(request)[0][1]
    view = rendered_view(service, request, await service.inspect(first, start_engine=False)) | export_view(
        service, request)
    bodies = json.loads(view["export_json"])
    assert len(bodies) == 2
    assert [sum(part["type"] == "image_url" for part in b["messages"][-1]["content"]) for b in bodies] == [1, 1]
    assert bodies[0]["messages"][-1]["content"][0] != bodies[1]["messages"][-1]["content"][0]  # each its page
    snippet = view["export_py"]
    compile(snippet, "snippet.py", "exec")
    assert "ThreadPoolExecutor(len(bodies))" in snippet
    assert f"python -m vlm_demo chat --model tiny-qwen2.5-vl --image report.pdf --pages 1,3 --dpi 72 --each-page " \
           "--text 'Read it.'" in snippet
    assert [row[0] for row in view["table"]] == ["page 1 of report.pdf"]  # the first page's request (no other known)
    each = [await service.inspect(one, start_engine=False) for _, one in page_requests(request)]
    sent = rendered_view(service, request, each[0], pages=each)  # after sending: every page's request, row, picture
    assert [row[0] for row in sent["table"]] == ["page 1 of report.pdf", "page 3 of report.pdf"]
    assert len(sent["gallery"]) == 2 and sent["prompt"].count('class="page-prompt"') == 2
