"""One sitting across every capability (issue 44), in a real browser against ``python app.py`` as a person runs it,
on a desktop and then on a dark phone, ended with SIGTERM: a picture (the panels follow it as it is attached), a PDF
(every page's cost within 2 s of attaching, no other click), a send the page refuses (too many pictures: the
question, its attachments and the panels stay, the note says why), pages and dpi moved, each page on its own (after
sending the panels keep every page's request), Stop, Retry, Export, Undo, a switch and a question during it (the wait
split into the engine's start and the prefill), a reader and its task (one that sends no text says so), the MCP tools
on the same server; every step's screenshot in ``test-artifacts/sitting/``, and the app's log free of Traceback,
ERROR and "force killing" (``Watch``); the app then exits within its grace with no process left."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import signal
import time

import psutil
import pytest
import yaml

from vlm_demo.profile import load_registry
from vlm_demo.settings import Settings

from .app_harness import launch_app
from .browser import SPLIT_WORDS_JS, Watch, chromium
from .conftest import ARTIFACTS, ROOT, command_line, data_url, make_image
from .test_journeys import Person

pytestmark = [pytest.mark.engine, pytest.mark.server, pytest.mark.browser]

SHOTS = ARTIFACTS / "sitting"
MODELS = ("tiny-qwen2.5-vl", "tiny-llava-1.5", "tiny-lightonocr")
"""The page's start-up model (pictures, the PDF), the model switched to, the reader."""
ATTACHED_S = 2.0
"""How soon after a file is attached on a ready page the panels show what it costs (issue 44)."""
ENGINE_START_S = 300


@pytest.fixture(scope="module")
def sitting_registry(tmp_path_factory):
    """models.yaml's entries of ``MODELS``, each answer running to max_tokens (``ignore_eos``) and short (8)."""
    data = yaml.safe_load((ROOT / "models.yaml").read_text())
    entries = [m for m in data["models"] if m["name"] in MODELS]
    for entry in entries:
        entry.setdefault("sampling", {}).update(ignore_eos=True, max_tokens=8)
    path = tmp_path_factory.mktemp("sitting") / "models.yaml"
    path.write_text(yaml.safe_dump({"models": entries}, sort_keys=False))
    return load_registry(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from .documents import make_pdf

    folder = tmp_path_factory.mktemp("files")
    pictures = []
    for i, (w, h) in enumerate(((640, 480), (480, 640))):
        pictures.append(folder / f"picture-{i + 1}.png")
        make_image(w, h, seed=i).save(pictures[-1])
    return pictures, make_pdf(folder / "report.pdf", pages=3)


def thumbnails(page) -> int:
    return page.locator("#question img, #question .thumbnail-item").count()


def close_toasts(page) -> list[str]:
    """The toasts shown (their text), each closed."""
    shown = [t.strip() for t in page.locator(".toast-body").all_inner_texts()]
    for close in page.locator(".toast-body .toast-close").all():
        with contextlib.suppress(Exception):
            close.click(timeout=2_000)
    page.wait_for_function("() => !document.querySelector('.toast-body')", timeout=10_000)
    return shown


def sitting(person: Person, files, url: str) -> None:
    """The sitting (see the module's docstring), on the page ``person`` has open."""
    page, watch, registry = person.page, person.watch, person.registry
    (first, second), report = files
    qwen, llava, reader = (registry.get(name) for name in MODELS)
    if page.locator("#model input").input_value() != qwen.display_label:  # (the phone opens on the model used last)
        person.pick(qwen)
    person.wait("() => /ready/.test(document.querySelector('#engine-state').innerText)", timeout_s=ENGINE_START_S)

    def rows() -> list[str]:
        return [r.strip() for r in page.locator("#image-table [role=row]").all_inner_texts()[1:]]

    # A picture: the panels follow it as it is attached, nothing else clicked
    person.attach(first)
    person.wait("() => /image 1/.test(document.querySelector('#image-table').innerText) && "
                "/tokens/.test(document.querySelector('#budget').innerText)", timeout_s=60)
    watch.check("a picture attached: its cost at once")
    person.ask("What is in the picture?")
    watch.check("asked about the picture")

    # A PDF: every page's cost within 2 s of attaching
    t0 = time.monotonic()
    person.attach(report, text="And these pages?")
    person.wait("() => ['page 1 of', 'page 2 of', 'page 3 of'].every(p => document.querySelector('#image-table')"
                ".innerText.includes(p)) && /report.pdf: 3 pages at 144 dpi/.test(document.querySelector('#budget')"
                ".innerText)", timeout_s=30)
    took = time.monotonic() - t0
    assert took <= ATTACHED_S, f"the PDF's pages showed {took:.2f} s after attaching"
    assert not page.evaluate(SPLIT_WORDS_JS)
    person.no_overflow()
    watch.check(f"a PDF attached: every page's cost in {took:.1f} s")

    # One picture more: five for a model that takes four, said before sending; sending is refused in place
    prompt_before = person.prompt()
    person.attach(second)
    person.wait("() => /cannot be sent: .*5 images/.test(document.querySelector('#message-note').innerText)",
                timeout_s=ATTACHED_S + 3)
    users, box = person.users(), thumbnails(page)
    page.locator("#question textarea").press("Enter")
    person.wait("() => /not sent: .*5 images/.test(document.querySelector('#message-note').innerText)", timeout_s=10)
    page.wait_for_timeout(500)  # (anything the refusal would change, changed)
    assert person.users() == users, "the refused question went into the chat"
    assert page.locator("#question textarea").input_value() == "And these pages?" and thumbnails(page) == box
    assert "holds 5 images" in person.prompt() or person.prompt() == prompt_before
    assert all("holds 5 images" in t for t in close_toasts(page))
    watch.check("a send the page refuses: nothing lost", errors_expected=True)

    # Fewer pages, another dpi: the note goes, the costs move; each page on its own
    pages = page.locator("#slider-pages textarea, #slider-pages input").first
    pages.fill("1-2")
    pages.press("Enter")
    person.wait("() => /2 pages at 144 dpi/.test(document.querySelector('#budget').innerText) && "
                "!document.querySelector('#message-note').innerText.trim()", timeout_s=30)
    watch.check("pages 1-2: the note gone")
    dpi = page.locator("#slider-dpi input[type=number]")
    dpi.fill("72")
    dpi.press("Enter")
    person.wait("() => /2 pages at 72 dpi/.test(document.querySelector('#budget').innerText)", timeout_s=30)
    watch.check("72 dpi: the costs moved")
    page.locator("#slider-each_page input[type=checkbox]").click()
    person.wait("() => /each page is its own request: 2 requests/.test("
                "document.querySelector('#rendered-prompt').innerText)", timeout_s=30)
    prompts = page.locator("#rendered-prompt details.page-prompt")
    assert prompts.count() == 2 and prompts.nth(0).get_attribute("open") is not None
    prompts.nth(1).locator("summary").click()  # the page picker: the second page's request
    assert prompts.nth(1).get_attribute("open") is not None and "page 2 of report.pdf" in prompts.nth(1).inner_text()
    watch.check("each page on its own: each page's prompt one click away")
    person.ask()
    assert re.search(r"2 pages, each on its own: the last done at [\d.]+ s", person.stats()), person.stats()
    person.wait("() => document.querySelectorAll('#rendered-prompt details.page-prompt').length === 2 && "
                "/page 2 of report.pdf/.test(document.querySelector('#image-table').innerText)", timeout_s=30)
    assert [r.split("\n")[0] for r in rows() if "report.pdf" in r] == ["page 1 of report.pdf", "page 2 of report.pdf"]
    watch.check("read page by page: every page's request kept after sending")

    # Stop, Retry, Export, Undo
    person.set_max_tokens(2048)
    person.retry_then_stop()
    watch.check("retried, stopped")
    if not page.locator("#export-json").is_visible():
        page.locator("#export").get_by_text("Export").first.click()
    person.wait("() => /data:image\\/png;base64/.test((document.querySelector('#export-json .cm-content') || "
                "{innerText: ''}).innerText)", timeout_s=30)
    watch.check("exported")
    person.undo()
    watch.check("undone")
    person.set_max_tokens(8)
    page.locator("#slider-each_page input[type=checkbox]").click()
    pages.fill("")
    pages.press("Enter")
    person.settle()

    # A switch, and a question at once: the wait, then the answer with the wait split
    person.pick(llava)
    person.ask("And now, in this model?")
    stats = person.stats()
    assert re.search(r"first token after [\d.]+ s: the engine's start [\d.]+ s \+ prefill [\d.]+ s", stats) or (
        "time to first token" in stats), stats  # (an engine up before the question was sent: no wait)
    watch.check("switched, asked during the start")
    person.clear()

    # A reader: its task, which sends no text, says so; the page read
    person.pick(reader)
    page.locator("#task input").click()
    page.get_by_role("option", name="Convert to Markdown", exact=True).click()
    person.wait("() => /sends no text/.test(document.querySelector('#message-note').innerText)", timeout_s=10)
    assert page.locator("#question textarea").input_value() == ""
    watch.check("the reader's task: no text, said")
    pages.fill("1")
    pages.press("Enter")
    person.settle()
    person.attach(report)
    person.wait("() => /1 page at 200 dpi/.test(document.querySelector('#budget').innerText)", timeout_s=30)
    person.ask()
    assert re.search(r"text tokens out per vision token in: [\d,]+ / [\d,]+", person.stats()), person.stats()
    watch.check("the reader read the page")
    pages.fill("")
    pages.press("Enter")
    person.clear()
    watch.check("cleared")

    # The MCP tools on the same server: what the document costs the reader, before anyone sends it
    from mcp.client.client import Client as McpClient

    async def cost():
        async with McpClient(url.rstrip("/") + "/gradio_api/mcp") as client:
            data = data_url(report.read_bytes(), "application/pdf")
            return await client.call_tool("document_cost", {"document": data, "model": reader.name, "pages": "1"})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (Playwright's own loop runs in this thread)
        found = pool.submit(asyncio.run, cost()).result(timeout=120)
    assert not found.is_error, found.content
    assert [(p["page"], p["dpi"]) for p in found.structured_content["pages"]] == [(1, 200)]
    watch.check("an agent asked the document's cost over MCP")


def test_one_sitting_across_every_capability(sitting_registry, files, tmp_path, report):
    import shutil

    from .conftest import release_session_engines

    release_session_engines()  # the app's engines get their memory
    shutil.rmtree(SHOTS, ignore_errors=True)
    log = ARTIFACTS / "sitting-app.log"
    env = {**os.environ, "VLM_DEMO_MODELS_FILE": str(sitting_registry.path), "VLM_DEMO_MODEL": MODELS[0],
           "GRADIO_TEMP_DIR": str(tmp_path / "gradio"), "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    proc, url = launch_app(env, log)
    try:
        with chromium() as browser:
            desktop = browser.new_page(viewport={"width": 1600, "height": 1000})
            watch = Watch(desktop, log, SHOTS, "desktop")
            with watch.failing():
                watch.open(url)
                sitting(Person(desktop, watch, sitting_registry), files, url)
            desktop.close()
            phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                                     color_scheme="dark")
            watch = Watch(phone, log, SHOTS, "phone", contrast=True)
            with watch.failing():
                watch.open(url + "?__theme=dark")
                sitting(Person(phone, watch, sitting_registry), files, url)
        ours = psutil.Process(proc.pid).children(recursive=True)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        elapsed = time.monotonic() - t0
        _, alive = psutil.wait_procs(ours, timeout=3)  # (a killed process may take a moment to go)
        left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                and "resource_tracker" not in command_line(p)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text(errors="replace")
    report(f"one sitting, desktop and dark phone: the app exited {elapsed:.1f} s after SIGTERM")
    assert rc == 0 and elapsed < Settings().stop_grace_s + 1, (rc, elapsed, text[-3000:])
    assert not left, [(p.pid, p.name(), p.cmdline()[:4]) for p in left]
    for problem in ("Traceback", " ERROR ", "force killing"):
        assert problem not in text, text[text.index(problem) - 500:][:3000]
