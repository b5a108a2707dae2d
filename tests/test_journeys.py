"""Journeys: the ways a person goes through the page, in a real browser (Debian's Chromium), against the app
as a person runs it (``python app.py``, its log in a file).

For every tiny model of models.yaml: pick it (its own controls and status at once, its engine starting), attach a
picture, move each control by its slider and by typing a value (the panels render with vLLM's renderer while the
engine starts), ask (the wait for the engine apart from the time to first token), attach two pictures and ask a
long answer, Stop it, Retry, Stop, Undo, a clip where the model takes video, Clear; Detect, reasoning, Compare
and Export on the way; one journey on a 390-px phone and one in dark mode. After every step (``Watch``): no
error badge or toast, no browser console error, no ``Traceback`` or ``ERROR`` in the app's log, no browser task
over 500 ms, and in dark mode text contrast of at least 4.5:1 for every element inside the panels. Screenshots of
every step go to ``test-artifacts/journeys/``. A document's way through the page (its pages' costs on attaching,
pages and dpi, page by page) is part of the one sitting across every capability (``test_sitting.py``).

The answers of the tiny (random-weight) models run to ``max_tokens`` here (the journey's registry sets
``ignore_eos``), so an answer to Stop is always still running when Stop is pressed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from vlm_demo import families
from vlm_demo.profile import load_registry, resolve
from vlm_demo.service import video_sampling

from .app_harness import launch_app
from .browser import SPLIT_WORDS_JS, Watch, chromium
from .conftest import ARTIFACTS, ROOT, make_image

pytestmark = [pytest.mark.engine, pytest.mark.server, pytest.mark.browser]


SHOTS = ARTIFACTS / "journeys"
ONLY = [n for n in os.environ.get("VLM_DEMO_JOURNEY_MODELS", "").split(",") if n]
"""Models to take the journey with, for a run by hand (default: every tiny model)."""
CLIP = ROOT / "assets" / "moving-square.webm"
ENGINE_START_S = 300
"""Longest wait for an answer whose engine starts meanwhile (about 20-50 s on two cores)."""


HUB_ENTRY = {"name": "hub-qwen2.5-vl", "label": "Hub Qwen2.5-VL", "family": "qwen2_5_vl",
             "repo": "nobody/not-cached-qwen2.5-vl", "download_gb": 7.5,
             "controls": [{"kwarg": "max_pixels", "label": "max_pixels (28x28 px per token)", "min": 3136,
                           "max": 1003520, "step": 784, "default": 401408}]}
"""A Hub checkpoint this machine does not have, whose Hub the app cannot reach (``HF_ENDPOINT`` is a closed port)."""
CLOSED_HUB = "http://127.0.0.1:9"


READER_ANSWERS = {
    # LightOnOCR (bbox variant): Markdown, an image's box after its reference on 0-1000 of the page
    "tiny-lightonocr": "# Quarterly report\n\n| region | revenue |\n|---|---|\n| north | 12 |\n\n"
                       "![image](image_1.png) 100,600,900,900\n",
    # dots.ocr: JSON layout cells, boxes in pixels of the page as its processor resized it
    "tiny-dots.ocr": '[{"bbox": [40, 30, 400, 60], "category": "Title", "text": "Quarterly report"}, '
                     '{"bbox": [40, 200, 500, 420], "category": "Table", "text": "<table><tr><td>north</td>'
                     '<td>12</td></tr></table>"}]',
    # DeepSeek-OCR: Markdown, each block after its label and boxes on a 0-999 grid of the page (no 30-character run
    # repeats: its n-gram logits processor would ban the forced answer's next token)
    "tiny-deepseek-ocr": "<|ref|>title<|/ref|><|det|>[[100, 40, 899, 80]]<|/det|>\n# Quarterly report\n\n"
                         "<|ref|>table<|/ref|><|det|>[[60, 300, 940, 700]]<|/det|>\n"
                         "<table><tr><td>north</td><td>12</td></tr></table>",
}
"""What each reader of the reader journey answers (its first page), by model."""
SMALL_PAGE_READERS = {"tiny-deepseek-ocr"}
"""Readers the journey gives a small page (a card, one view: no crops): DeepSeek-OCR's tiny model encodes with the
checkpoint's full-size SAM-B and CLIP-L (vLLM 0.32 builds them whatever the config says), 20 s for one view here
and a minute for an A4 page's seven."""


def literal(text: str) -> str:
    """A regex that admits ``text`` alone (newlines as ``\\n``; spaces as they are: xgrammar warns at ``\\ ``)."""
    return re.escape(text).replace("\\\n", "\\n").replace("\\ ", " ")


@pytest.fixture(scope="module")
def journey_registry(tmp_path_factory):
    """models.yaml's tiny entries, each answer running to max_tokens (``ignore_eos``; at most 64), and ``HUB_ENTRY``,
    as a registry file."""
    data = yaml.safe_load((ROOT / "models.yaml").read_text())
    tiny = [m for m in data["models"] if m.get("tiny")]
    for entry in tiny:
        entry.setdefault("sampling", {})["ignore_eos"] = True
        # (a reader's own max_tokens holds a page: thousands of random tokens per question here; the page's default
        # is checked in test_registry)
        entry["sampling"]["max_tokens"] = min(entry["sampling"].get("max_tokens", 64), 64)
        if entry["name"] in READER_ANSWERS:  # random weights write no layout: each reader's answer is held to a
            # hand-made one of known coordinates (vLLM's structured outputs), which the page must draw and render
            entry["sampling"] |= {"regex": literal(READER_ANSWERS[entry["name"]]), "ignore_eos": False,
                                  "max_tokens": 512}
    path = tmp_path_factory.mktemp("journeys") / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [*tiny, HUB_ENTRY]}, sort_keys=False))
    return load_registry(path)


@pytest.fixture(scope="module")
def app(journey_registry, tmp_path_factory):
    """``python app.py`` over the journey's registry, its log (stdout and stderr) in a file; stopped as a person
    stops it (SIGTERM)."""
    import shutil

    from .conftest import release_session_engines

    release_session_engines()  # the app's engines get their memory
    shutil.rmtree(SHOTS, ignore_errors=True)
    folder = tmp_path_factory.mktemp("app")
    log = ARTIFACTS / "journeys-app.log"
    env = {**os.environ, "VLM_DEMO_MODELS_FILE": str(journey_registry.path), "GRADIO_TEMP_DIR": str(folder),
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", "HF_ENDPOINT": CLOSED_HUB}
    env.pop("HF_HUB_OFFLINE", None)
    # The browser as on a person's own machine (its own session); the app in a session of its own, which it lowers
    # itself (VLM_DEMO_SESSION_NICE): vLLM's engine core busy-waits, and Chromium otherwise got no CPU for seconds
    proc, url = launch_app(env, log)
    try:
        yield url, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") - 500:][:4000]


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pictures")
    paths = []
    for i, (w, h) in enumerate(((1280, 720), (640, 480), (480, 640))):
        path = folder / f"picture-{i + 1}.png"
        make_image(w, h, seed=i).save(path)
        paths.append(path)
    return paths


def sent_as(spec, kwarg: str) -> tuple[str, ...]:
    """The names a control's value goes to vLLM under (Qwen's min_pixels: images_kwargs.size.shortest_edge, ...)."""
    from vlm_demo.registry import flat_kwargs

    marker = 987654321
    sent = flat_kwargs(resolve(spec).mm_processor_kwargs({kwarg: marker}))
    return tuple(k for k, v in sent.items() if v == marker) or (kwarg,)


class Person:
    """A person at the page: each action as they do it (clicks, typing, files), each followed by the checks."""

    def __init__(self, page, watch: Watch, registry):
        self.page, self.watch, self.registry = page, watch, registry

    # -- what they look at

    def status(self) -> str:
        """The status line about the page's model (the other engines it lists aside)."""
        return self.page.locator("#engine-state").inner_text().split("also running:")[0]

    def engines_listed(self) -> str:
        """The status line's list of the other engines that run or start."""
        text = self.page.locator("#engine-state").inner_text()
        return text.split("also running:")[1] if "also running:" in text else ""

    def stats(self) -> str:
        return self.page.locator("#stats").inner_text()

    def users(self) -> list[str]:
        return [t.strip() for t in self.page.locator("#chat .user").all_inner_texts()]

    def prompt(self) -> str:
        return self.page.locator("#rendered-prompt").inner_text()

    def settings_line(self) -> str:
        locator = self.page.locator("#rendered-prompt .sent-settings")  # (page by page: each page's, the first)
        return locator.first.inner_text() if locator.count() else ""

    def visible_controls(self) -> set[str]:
        """The ids of the processor and video controls shown."""
        return set(self.page.evaluate("""() => [...document.querySelectorAll('#settings-panel [id^=slider-]')]
                                         .filter(e => e.getClientRects().length).map(e => e.id)"""))

    def wait(self, js: str, arg=None, timeout_s: float = 60) -> None:
        self.page.wait_for_function(js, arg=arg, timeout=timeout_s * 1000)

    # -- what they do

    def pick(self, spec) -> None:
        """Choose ``spec`` in the model picker: its status says it is starting at once, its own controls show."""
        self.page.locator("#model input").click()
        self.page.get_by_role("option", name=spec.display_label, exact=True).click()
        self.wait("l => document.querySelector('#engine-state').innerText.includes(l)", spec.display_label, 5)
        assert re.search(r"starting|ready", self.status()), self.status()
        expected = {f"slider-{c.kwarg.replace('.', '-')}" for c in spec.controls}
        if spec.engine_args.limit_mm_per_prompt.get("video", 0):
            expected |= {"slider-fps"} | ({"slider-num_frames"} if video_sampling(resolve(spec)) != "fps" else set())
        if spec.engine_args.limit_mm_per_prompt.get("image", 0):  # how a PDF's pages are read
            expected |= {"slider-dpi", "slider-pages", "slider-each_page"}
        # (an entry that lists no controls gets its processor's own, derived by the page: Gemma 4's max_soft_tokens)
        shown = (lambda: self.visible_controls() == expected) if spec.controls else (
            lambda: expected <= self.visible_controls())
        deadline = time.monotonic() + 5
        while not shown() and time.monotonic() < deadline:
            self.page.wait_for_timeout(100)
        assert shown(), (spec.name, self.visible_controls(), expected)
        for control in spec.controls:  # the model's own labels
            assert control.label in self.page.locator(f"#slider-{control.kwarg.replace('.', '-')}").inner_text()
        self.settle()  # the panels: the conversation so far, rendered for this model by vLLM's renderer
        self.watch.check(f"pick {spec.name}")

    def attach(self, *files: Path, text: str | None = None) -> None:
        self.page.locator("#question input[type=file]").set_input_files([str(f) for f in files])
        self.wait("n => document.querySelectorAll('#question img, #question video, #question .thumbnail-item')"
                  ".length >= n", len(files), 30)
        if text is not None:
            self.page.locator("#question textarea").fill(text)

    def settle(self, timeout_s: float = 120) -> None:
        """Wait until the panels' event has ended (Gradio's progress over the prompt panel is gone)."""
        self.page.wait_for_timeout(300)
        self.wait("() => !document.querySelector('#rendered-prompt .wrap.translucent')", timeout_s=timeout_s)

    def inspect(self) -> None:
        self.page.locator("#inspect").click()
        self.settle()
        assert self.settings_line(), "Inspect only showed no render"

    def move_controls(self, spec) -> None:
        """Each of the model's controls: by its slider (a click on its track), then by typing a value and Enter;
        the panels render again each time, with the value the control shows."""
        for control in spec.controls:
            slot = self.page.locator(f"#slider-{control.kwarg.replace('.', '-')}")

            def shown(value, keys=sent_as(spec, control.kwarg)) -> bool:  # the line of settings sent says key=value
                return any(re.search(rf"(^|[\s,:]){re.escape(key)}={value}\b", self.settings_line()) for key in keys)
            if control.kind == "bool":
                slot.locator("input[type=checkbox]").click()
                self.settle()
                checked = slot.locator("input[type=checkbox]").is_checked()
                assert shown("true" if checked else "false"), self.settings_line()
                self.watch.check(f"{control.kwarg} clicked")
                continue
            track = slot.locator("input[type=range]")
            track.scroll_into_view_if_needed()
            box = track.bounding_box()
            self.page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
            self.settle()
            value = int(float(slot.locator("input[type=number]").input_value()))
            assert shown(value), (control.kwarg, value, self.settings_line())
            self.watch.check(f"{control.kwarg} slid to {value}")
            typed = control.min + ((control.max - control.min) * 2 // 3) // control.step * control.step
            number = slot.locator("input[type=number]")
            number.fill(str(typed))
            number.press("Enter")
            self.settle()
            assert shown(typed), (control.kwarg, typed, self.settings_line())
            self.watch.check(f"{control.kwarg} typed {typed}")

    def ask(self, text: str | None = None, then_stop: bool = False) -> None:
        """Press Enter in the message box (the text typed there, or ``text``): the answer, or with ``then_stop``
        Stop once it streams."""
        box = self.page.locator("#question textarea")
        if text is not None:
            box.fill(text)
        bots = self.page.locator("#chat .bot").count()
        # the stats line goes through this answer's own states (sent, rendered, waiting, generating) before its end:
        # the last answer's figures, still shown as the new one starts, are not its end
        self.page.evaluate("""() => { window.answerPhase = 0; const stats = document.querySelector('#stats');
            new MutationObserver(() => { const t = stats.innerText;
                if (/rendering the question|waiting for the|generating/.test(t)) window.answerPhase = 1;
                else if (window.answerPhase === 1 && /tokens\\/s · finish/.test(t)) window.answerPhase = 2;
            }).observe(stats, {subtree: true, childList: true, characterData: true}); }""")
        self.t_enter = time.time()
        box.press("Enter")
        if then_stop:
            self.stop(bots)
        else:
            self.wait("() => window.answerPhase === 2", timeout_s=ENGINE_START_S)
        # the question in the chat, the message box empty for the next one
        asked = (text if text is not None else "").strip().splitlines()
        self.wait("q => { const u = document.querySelectorAll('#chat .user'); return u.length && "
                  "u[u.length - 1].innerText.includes(q); }", asked[0] if asked else "", 30)
        self.wait("() => document.querySelector('#question textarea').value === ''", timeout_s=30)

    def stop(self, bots: int) -> None:
        """Press Stop mid-answer, once its first words show (the tiny model writes 2048 tokens in 5-7 s): the
        answer stays as far as it went, marked stopped, the stats say how far, Stop is inactive again."""
        self.wait("n => { const b = document.querySelectorAll('#chat .bot'); return b.length > n && "
                  "b[b.length - 1].innerText.trim().length > 0 && "
                  "/generating/.test(document.querySelector('#stats').innerText); }", bots, ENGINE_START_S)
        self.watch.begin()
        self.page.locator("#stop").click(timeout=10_000)
        self.wait("() => /stopped after \\d+ tokens/.test(document.querySelector('#stats').innerText)",
                  timeout_s=30)
        self.wait("() => document.querySelector('#stop').disabled", timeout_s=10)
        assert "[stopped]" in self.page.locator("#chat .bot").last.inner_text()

    def retry_then_stop(self) -> None:
        """Retry the last question, then Stop its (long) answer once it streams: the same questions stay."""
        users = self.users()
        bots = self.page.locator("#chat .bot").count()
        self.watch.begin()
        self.page.locator("#retry").click()
        self.wait("() => !document.querySelector('#stop').disabled", timeout_s=10)
        self.stop(bots - 1)
        assert self.users() == users, (users, self.users())

    def undo(self) -> None:
        """Undo: the last exchange goes, and the panels show vLLM's render of what is left."""
        users = self.users()
        self.page.locator("#undo").click()
        self.wait("n => document.querySelectorAll('#chat .user').length === n", len(users) - 1, 10)
        self.settle()
        assert self.users() == users[:-1]
        removed = users[-1].splitlines()[-1]
        assert removed not in self.prompt(), f"the panels still show the removed question {removed!r}"

    def empty_box(self) -> None:
        """Remove the message box's text, then each of its files, as a person drops a draft."""
        self.page.locator("#question textarea").fill("")
        self.page.wait_for_timeout(300)
        while self.page.locator("#question [aria-label='Remove file']").count():
            self.page.locator("#question [aria-label='Remove file']").first.click()
            self.page.wait_for_timeout(300)
        self.wait("() => !document.querySelector('#question .thumbnail-item')", timeout_s=10)

    def clear(self) -> None:
        self.page.locator("#clear").click()
        self.wait("() => document.querySelectorAll('#chat .user').length === 0", timeout_s=10)
        self.settle()
        assert not self.page.locator("#rendered-prompt .sent-settings").count(), "the panels still show the cleared conversation"

    def check_export(self, spec) -> None:
        """Export replays the answer's request against ``vllm serve`` of this model: its directory, served under
        the entry's name, and only this model's own processor settings."""
        from vlm_demo.registry import flat_kwargs

        if not self.page.locator("#export-curl").is_visible():
            self.page.locator("#export").get_by_text("Export").first.click()
        self.wait("n => (document.querySelector('#export-curl .cm-content') || {innerText: ''}).innerText"
                  ".includes('--served-model-name ' + n)", spec.name, 30)
        curl = self.page.locator("#export-curl .cm-content").inner_text()
        assert "--load-format dummy" in curl and f"vllm serve {spec.name} " not in curl, curl
        head = self.page.locator("#export-json .cm-content").inner_text()  # settings first, the messages last
        assert re.search(rf'"model": "{re.escape(spec.name)}"', head), head[:500]
        sent = re.search(r'"mm_processor_kwargs": (\{.*?\}),?\n "', head, re.S)
        if sent:
            import json
            names = set(flat_kwargs(json.loads(sent[1])))  # as vLLM takes them (Qwen's size, scoped)
            assert names <= {n for c in spec.controls for n in sent_as(spec, c.kwarg)}, sent[1]
        if spec.reasoning_parser:
            assert "reasoning" in self.page.locator("#export-py .cm-content").inner_text()

    def check_reasoning(self) -> None:
        """A reasoning model's thinking shows apart; an answer that is all thinking says so."""
        bots = self.page.locator("#chat .bot").all_inner_texts()
        assert any("Reasoning" in b for b in bots), bots
        if "reasoning" in self.stats():
            last = bots[-1]
            assert last.strip() and ("no answer after the reasoning" in last or "Reasoning" not in last), bots

    def detect(self, what: str, text: str) -> None:
        """Detect mode: the person's question goes with the family's own detection prompt, the answer's box is
        drawn on the picture and listed."""
        self.page.locator("#detect textarea").fill(what)
        self.ask(text)
        user = self.page.locator("#chat .user").last.inner_text()
        assert text in user and "every the" not in user, user
        self.wait("() => document.querySelectorAll('#chat .bot img').length >= 1 && "
                  "document.querySelectorAll('#boxes tbody tr').length >= 1", timeout_s=30)
        self.page.locator("#detect textarea").fill("")

    def compare(self, other, picture: Path) -> None:
        """Compare: side A follows the page's model; side B another model; both rendered."""
        current = self.page.locator("#model input").input_value()
        if not self.page.locator("#compare-btn").is_visible():
            self.page.locator("#compare").get_by_text("Compare two settings").click()
        assert self.page.locator("#model-a input").input_value() == current
        self.page.locator("#model-b input").click()
        self.page.get_by_role("option", name=other.display_label, exact=True).click()
        self.page.wait_for_timeout(300)
        self.page.locator("#compare-btn").click()
        self.wait("() => ['#compare-a', '#compare-b'].every(s => /tokens/.test(document.querySelector(s).innerText))",
                  timeout_s=120)

    def no_overflow(self) -> None:
        """Nothing is wider than the screen, and nothing in the panels scrolls sideways (the rendered prompt and
        the expansion table wrap)."""
        wide = self.page.evaluate("""() => [document.documentElement, ...document.querySelectorAll(
                '#prompt-panel *, #chat-panel *, #settings-panel *')]
            .filter(e => { const o = getComputedStyle(e).overflowX;
                           return (e === document.documentElement || o === 'auto' || o === 'scroll')
                                  && e.getClientRects().length && e.scrollWidth > e.clientWidth + 1; })
            .map(e => (e.id || e.className || e.tagName) + ' ' + e.scrollWidth + '>' + e.clientWidth)""")
        assert not wide, f"wider than its box: {wide}"

    def set_max_tokens(self, n: int) -> None:
        accordion = self.page.locator("#sampling")
        if not self.page.locator("#max-tokens").is_visible():
            accordion.get_by_text("Sampling").click()
        number = self.page.locator("#max-tokens input[type=number]")
        for _ in range(5):  # the accordion just opened may still draw its slider (CI: the box went back to 64)
            number.fill(str(n))
            number.press("Enter")
            self.page.wait_for_timeout(300)
            if self.page.evaluate("n => [...document.querySelectorAll('#max-tokens input')].every(i => i.value == n)",
                                  n):
                return
        raise AssertionError(f"max_tokens did not take {n}")


def model_journey(person: Person, spec, pictures, first: bool, compare_with=None) -> None:
    """One model's part of the desktop journey (see the module's docstring)."""
    watch, page = person.watch, person.page
    if first:  # the page's model: chosen already, its engine started as the app came up
        assert re.search(r"starting|ready", person.status()) and spec.display_label in person.status()
    else:
        person.pick(spec)
    person.attach(pictures[0], text="What is written here?")
    # the panels follow the picture attached, no click (vLLM's renderer, while the engine starts too)
    person.wait("() => !!document.querySelector('#rendered-prompt .sent-settings') && "
                "/image 1/.test(document.querySelector('#image-table').innerText)", timeout_s=120)
    person.settle()
    if first:
        person.inspect()  # (Inspect only renders the same)
    person.no_overflow()
    watch.check(f"{spec.name}: one picture attached, its cost shown")
    if compare_with is not None:
        person.compare(compare_with, pictures[0])
        watch.check(f"{spec.name}: compare with {compare_with.name}")
    person.move_controls(spec)
    before = person.status()
    person.ask()
    person.wait("() => /engine: ready/.test(document.querySelector('#engine-state').innerText)", timeout_s=10)
    assert spec.display_label in person.status()
    stats = person.stats()
    assert re.search(r"time to first token|first token after", stats), stats
    if "engine's start" in stats:  # asked while its engine started: the wait split into the start and the prefill
        assert re.search(r"first token after [\d.]+ s: the engine's start [\d.]+ s \+ prefill [\d.]+ s · ", stats), stats
    if "ready" in before:  # (an engine up in 3 s may be ready before the first question: then no wait)
        assert "engine's start" not in stats, (before, stats)
    watch.check(f"{spec.name}: answered")
    person.check_export(spec)
    if spec.reasoning_parser:
        person.check_reasoning()
        watch.check(f"{spec.name}: reasoning apart")
    if person.page.locator("#detect").is_visible() and first:
        person.detect("the yellow band", "Find it.")
        watch.check(f"{spec.name}: detect")
    person.set_max_tokens(2048)
    person.attach(pictures[1], pictures[2], text="And these two?")
    person.ask(then_stop=True)
    assert "engine's start" not in person.stats()  # the engine runs now: no wait
    watch.check(f"{spec.name}: two pictures, stopped")
    person.retry_then_stop()
    watch.check(f"{spec.name}: retried, stopped")
    person.undo()
    watch.check(f"{spec.name}: undone")
    person.set_max_tokens(8)
    if spec.engine_args.limit_mm_per_prompt.get("video", 0):
        person.attach(CLIP, text="Where does the square go?")
        own_sound = page.locator("#slider-use_audio_in_video input[type=checkbox]")
        if own_sound.count() and own_sound.is_checked():  # (left on by move_controls: the clip has no sound track)
            page.locator("#question textarea").press("Enter")
            person.wait("() => /moving-square.webm has no sound track, and use_audio_in_video/"
                        ".test(document.querySelector('#message-note').innerText)", timeout_s=30)
            watch.check(f"{spec.name}: a silent clip refused its sound in one line")
            own_sound.click()
            person.settle()
        person.ask()
        user = page.locator("#chat .user").last
        assert "[video: moving-square.webm" in user.inner_text() and user.locator("img").count() == 1
        # (the panels follow the render; eight tokens may be done before a clip's contact sheet is drawn)
        person.wait("() => /video/.test(document.querySelector('#budget .budget-text').innerText)", timeout_s=30)
        watch.check(f"{spec.name}: a clip")
    person.clear()
    watch.check(f"{spec.name}: cleared")


def journey_models(registry) -> list:
    """The chat models' journeys: every tiny model but the document readers (a family with tasks: no chat to have,
    and DeepSeek-OCR's full-size encoders take 20-60 s a page here)."""
    return [m for m in registry.models if m.tiny and not families.get(m.family).tasks and (not ONLY or m.name in ONLY)
            and m.engine_args.limit_mm_per_prompt.get("image", 0)  # (a model that only listens: its own journey)
            # (nor one that listens with no control to move: the listening journey asks it a picture and a clip)
            and not (m.engine_args.limit_mm_per_prompt.get("audio", 0) and not resolve(m).controls)]


def listening_models(registry) -> list:
    """The tiny models that take clips (their journey: ``listening_journey``)."""
    return [m for m in registry.models if m.tiny and m.engine_args.limit_mm_per_prompt.get("audio", 0)
            and (not ONLY or m.name in ONLY)]


def listening_journey(person: Person, spec, clips: dict[str, Path], picture: Path) -> None:
    """Issue 47's journey for a model that listens: record a clip with the message box's microphone (Chromium's fake
    capture device plays a WAV), with a picture where the model takes pictures too: its seconds, rates and tokens and
    its waveform before sending; ask; a long answer
    stopped, retried, stopped; a 45-s clip: what its cap cuts, said before sending; a file that is no clip: one line
    beside the box, nothing else changed; Clear."""
    watch, page = person.watch, person.page
    person.pick(spec)
    page.get_by_label("Record audio").click()
    page.get_by_label("Start recording").click()
    page.wait_for_timeout(2500)
    page.locator("#question .stop-button").first.click()
    page.get_by_label("Attach audio").click(timeout=10_000)
    takes_pictures = bool(spec.engine_args.limit_mm_per_prompt.get("image", 0))
    if takes_pictures:  # (an omni model: the clip and a picture in one message)
        page.locator("#question input[type=file]").set_input_files([str(picture)])
        person.wait("() => /image 1/.test(document.querySelector('#image-table').innerText)", timeout_s=60)
    page.locator("#question textarea").fill("What is said?")
    person.wait("() => /audio 1 \\(audio.wav\\): [\\d.]+ s at (44.1|48) kHz -> 16 kHz: \\d+ tokens/"
                ".test(document.querySelector('#budget').innerText)", timeout_s=60)
    person.settle()
    assert page.locator("#overlays img").count() >= 1  # the waveform
    assert "audio 1" in page.locator("#image-table").inner_text()
    watch.check(f"{spec.name}: a clip recorded, its cost shown")
    person.ask()
    assert page.locator("#chat .user").last.locator("audio").count() == 1  # the clip plays in the chat
    watch.check(f"{spec.name}: answered")
    person.set_max_tokens(2048)
    person.ask("And more?", then_stop=True)
    person.retry_then_stop()
    watch.check(f"{spec.name}: stopped, retried, stopped")
    person.set_max_tokens(8)
    person.attach(clips["long"], text="And this one?")
    count = next(k.count for k in families.get(spec.family).known_counts["audio"] if k.size == 45.0)
    cut = ".*30.0 of 45.0 s heard: the last 15.0 s were cut" if count < 45 * 25 else ""  # (Qwen2-Audio's 30-s cap)
    person.wait(f"() => /45.0 s at 44.1 kHz -> 16 kHz: {count:,} tokens {cut}/"
                ".test(document.querySelector('#budget').innerText)", timeout_s=60)
    person.settle()
    assert bool(cut) == ("were cut" in page.locator("#budget").inner_text())
    watch.check(f"{spec.name}: a 45-s clip, its cost (and what a cap cuts) said before sending")
    users = person.users()
    page.locator("#question input[type=file]").set_input_files([str(clips["bad"])])
    person.wait("() => /broken.wav/.test(document.querySelector('#message-note').innerText)", timeout_s=30)
    note = page.locator("#message-note").inner_text().strip()
    assert "\n" not in note and "Traceback" not in note, note
    assert person.users() == users
    watch.check(f"{spec.name}: a file that is no clip, one line")
    person.empty_box()
    person.wait("() => !document.querySelector('#message-note').innerText.trim()", timeout_s=10)
    person.clear()
    watch.check(f"{spec.name}: cleared")


def test_every_model_end_to_end(app, journey_registry, pictures, report):
    """Desktop, 1600 px: every tiny model's journey, one after another in one tab; Compare once on the way."""
    url, log = app
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        watch = Watch(page, log, SHOTS, "desktop")
        person = Person(page, watch, journey_registry)
        t0 = time.monotonic()
        with watch.failing():
            watch.open(url)
            watch.check("open the page")
            models = journey_models(journey_registry)
            for i, spec in enumerate(models):  # (the page opens on the registry's first model)
                model_journey(person, spec, pictures, first=spec.name == journey_registry.models[0].name,
                              compare_with=models[0] if i == 1 else None)
        report(f"desktop journey: {len(journey_models(journey_registry))} models, {watch.steps} steps in "
               f"{time.monotonic() - t0:.0f} s")


def test_on_a_phone(app, journey_registry, pictures):
    """390 x 844: the model row stacks (the name whole), the chat comes first, nothing is wider than the screen;
    pick, attach, ask, Stop."""
    url, log = app
    spec = journey_models(journey_registry)[-1]  # (after the desktop journey: its engine runs)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        watch = Watch(page, log, SHOTS, "phone")
        person = Person(page, watch, journey_registry)
        with watch.failing():
            watch.open(url)
            model, status = page.locator("#model").bounding_box(), page.locator("#engine-state").bounding_box()
            assert status["y"] >= model["y"] + model["height"] - 1, (model, status)  # stacked
            cut = page.evaluate("() => { const i = document.querySelector('#model input'); "
                                "return i.scrollWidth > i.clientWidth + 1; }")
            assert model["width"] >= 300 and not cut, model  # the model's name whole
            chat, settings = page.locator("#chat-panel").bounding_box(), page.locator("#settings-panel").bounding_box()
            assert chat["y"] < settings["y"] and chat["y"] < 700, (chat, settings)  # the chat first, near the top
            person.no_overflow()
            watch.check("open the page")
            person.pick(spec)
            person.attach(pictures[0], text="What is written here?")
            person.ask()
            person.no_overflow()
            split = page.evaluate(SPLIT_WORDS_JS)
            assert not split, f"numbers broken across lines in the expansion table: {split}"
            watch.check("answered")
            person.set_max_tokens(2048)
            person.ask("And more?", then_stop=True)
            person.no_overflow()
            watch.check("stopped")


def test_in_dark_mode(app, journey_registry, pictures):
    """Dark mode: every step's text inside the panels keeps a contrast of at least 4.5:1 (special tokens and the
    image runs of the prompt too), with the engine running and while it does not; another model picked while an
    answer streams stops it, and the next question goes to that model."""
    url, log = app
    # not the page's first model (picking it starts its engine), and one whose template has special tokens
    spec = next(m for m in journey_models(journey_registry)[1:] if m.family != "llava")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1000}, color_scheme="dark")
        watch = Watch(page, log, SHOTS, "dark", contrast=True)
        person = Person(page, watch, journey_registry)
        with watch.failing():
            watch.open(url + "?__theme=dark")
            assert page.evaluate("document.body.classList.contains('dark')")
            watch.check("open the page")
            person.pick(spec)  # its engine starts: Inspect renders with vLLM's renderer alone meanwhile
            person.attach(pictures[0], text="What is written here?")
            person.inspect()
            assert "ready" not in person.status()
            assert page.locator("#rendered-prompt mark.sp").count() > 0  # special tokens marked without an engine
            watch.check("inspect while the engine starts")
            person.ask()
            assert page.locator("#rendered-prompt mark.sp").count() > 0 and page.locator(
                "#rendered-prompt mark.ph").count() > 0
            watch.check("answered")
            person.set_max_tokens(2048)
            person.ask("And more?", then_stop=True)
            watch.check("stopped")
            person.retry_then_stop()
            watch.check("retried, stopped")
            # another model picked while an answer streams: the answer stops there (as Stop stops it), and the
            # message box sends the next question, to the model now chosen (it used to drop it until the first
            # answer had ended)
            bots = page.locator("#chat .bot").count()
            page.locator("#question textarea").fill("Once more?")
            page.locator("#question textarea").press("Enter")
            person.wait("n => document.querySelectorAll('#chat .bot').length > n && "
                        "/generating/.test(document.querySelector('#stats').innerText)", bots, ENGINE_START_S)
            other = journey_models(journey_registry)[0]
            person.pick(other)
            person.wait("() => /\\[stopped\\]/.test([...document.querySelectorAll('#chat .bot')].pop().innerText)",
                        timeout_s=10)
            person.ask("And now?")
            assert person.users()[-1] == "And now?" and other.display_label in person.status()
            watch.check("switched mid-answer, asked again")


SEEN_JS = """() => { window.seen = {}; const marks = {
        question: () => { const u = document.querySelectorAll('#chat .user');
                          return u.length && u[u.length - 1].innerText.includes('And now, in this model?'); },
        panels: () => document.querySelector('#rendered-prompt').innerText.includes('And now, in this model?'),
        wait: () => /waiting for the .* engine to start/.test(document.querySelector('#stats').innerText) };
    new MutationObserver(() => { for (const [k, ok] of Object.entries(marks))
        if (!(k in window.seen) && ok()) window.seen[k] = performance.now(); })
        .observe(document.body, {subtree: true, childList: true, characterData: true}); }"""
"""Records when the question, its panels and the wait line first show (``window.seen``, ``performance.now()``)."""
PANELS_AFTER_SEND_S = 1.5
"""How soon after sending to a model whose engine is not running the panels show vLLM's render of the question."""
LIVE_TASK_MS = 200
"""Longest browser task while a 2048-token answer streams at full speed (issue 37: the page stays alive)."""


def started(log: Path, spec) -> int:
    """How many times the app has started ``spec``'s engine (its log's own line)."""
    return log.read_text(errors="replace").count(f"started {spec.name} in ")


def running_labels(person: Person, registry) -> set[str]:
    """The models whose engines run or start, as every tab's status line lists them."""
    status = person.engines_listed()
    return {m.name for m in registry.models if m.label in status and re.search(
        rf"{re.escape(m.label)}[^·]*?(ready|starting)", status)}


def switching_journey(person: Person, registry, pictures, url, log, browser, report, **page_args) -> None:
    """Issue 37's journey: ask model A; pick B (its engine not running) and ask at once: the question, its panels
    (vLLM's render without an engine) and the wait line within a second, the answer once B is up, the stats' wait
    within 2 s of the one measured here; pick A again (no engine start); pick a Hub model this machine cannot
    fetch (refused in place, A still answers); a 2048-token answer streams at full speed with no browser task over
    ``LIVE_TASK_MS``; a second tab opens on A, ready."""
    page, watch = person.page, person.watch
    a = next(m for m in journey_models(registry) if m.display_label == page.locator("#model input").input_value())
    person.attach(pictures[0], text="What is written here?")
    person.ask()
    watch.check(f"A ({a.name}) answered")
    busy = running_labels(person, registry) | {a.name}
    b = next(m for m in journey_models(registry) if m.name not in busy)
    before_b = started(log, b)
    page.locator("#model input").click()
    page.get_by_role("option", name=b.display_label, exact=True).click()
    page.locator("#question textarea").fill("And now, in this model?")
    page.evaluate(SEEN_JS)  # when each shows, as the page changes
    t_sent = time.monotonic()
    page.locator("#question textarea").press("Enter")
    page.evaluate("() => { window.seen.sent = performance.now(); }")
    person.wait("() => ['question', 'panels', 'wait'].every(k => k in window.seen)", timeout_s=30)
    seen = page.evaluate("window.seen")
    t_question, t_panels, t_wait_line = ((seen[k] - seen["sent"]) / 1000 for k in ("question", "panels", "wait"))
    # the question and the wait line within a second; the panels need vLLM's renderer of B built as it is picked
    # (config, tokenizer, processor: 0.6-0.9 s after sending here, 1.05 s in one CI run, on 2 cores beside B's
    # engine start), so PANELS_AFTER_SEND_S: what fails is a panel that waits for B's engine (5 s and more)
    assert max(t_question, t_wait_line) <= 1.0 and t_panels <= PANELS_AFTER_SEND_S, (t_question, t_panels,
                                                                                     t_wait_line)
    watch.check(f"B ({b.name}) asked while its engine starts")
    person.wait("() => /generating|tokens\\/s/.test(document.querySelector('#stats').innerText)",
                timeout_s=ENGINE_START_S)
    measured = time.monotonic() - t_sent
    person.wait("() => /tokens\\/s · finish/.test(document.querySelector('#stats').innerText)", timeout_s=60)
    first = re.search(r"first token after ([\d.]+) s: the engine's start ([\d.]+) s", person.stats())
    waited = float(first[2])  # the wait the person had: the engine's start, then the prefill
    assert abs(float(first[1]) - measured) <= 2.0, (first[0], measured)
    assert started(log, b) == before_b + 1 and "ready" in person.status()
    watch.check(f"B answered after a wait of {waited:.1f} s (measured {measured:.1f} s)")
    before_a = started(log, a)
    person.pick(a)
    assert "ready" in person.status() and started(log, a) == before_a, person.status()  # warm: no start
    watch.check("A picked again: no engine start")
    hub = next(m for m in registry.models if m.repo)
    page.locator("#model input").click()
    page.get_by_role("option", name=re.compile(re.escape(hub.display_label))).click()
    person.wait("() => /cannot start here/.test(document.querySelector('#model-note').innerText)", timeout_s=10)
    note = page.locator("#model-note").inner_text()
    assert "download of 7.5 GB" in note and "cannot be reached" in note, note
    person.wait("l => document.querySelector('#model input').value === l", a.display_label, 10)
    person.set_max_tokens(2048)
    watch.begin()
    person.ask("Still there? Tell me everything.")
    stats = person.stats()
    assert "engine's start" not in stats and started(log, a) == before_a
    slow = [t["ms"] for t in page.evaluate("window.longTasks || []")
            if t["start"] >= watch.step_started and t["ms"] > LIVE_TASK_MS]
    assert not slow, f"browser tasks over {LIVE_TASK_MS} ms while 2048 tokens streamed: {slow}"
    longest = max([t["ms"] for t in page.evaluate("window.longTasks || []") if t["start"] >= watch.step_started],
                  default=0)
    rate = (re.search(r"[\d.]+ tokens/s", stats) or [f"no rate in {stats!r}"])[0]
    report(f"switching ({page_args['viewport']['width']} px): question {t_question:.2f} s, panels {t_panels:.2f} s, "
           f"wait line {t_wait_line:.2f} s after sending; waited {waited:.1f} s (measured {measured:.1f} s); "
           f"2048 tokens streamed with the longest browser task {longest:.0f} ms "
           f"({rate})")
    watch.check("a Hub model refused in place; A answers 2048 tokens, the page alive")
    second = browser.new_page(**page_args)
    second.goto(url + ("?__theme=dark" if page_args.get("color_scheme") == "dark" else ""))
    second.wait_for_function("l => (document.querySelector('#model input') || {}).value === l && /ready/.test("
                             "document.querySelector('#engine-state').innerText)", arg=a.display_label, timeout=30_000)
    second.close()
    person.set_max_tokens(8)
    person.clear()
    watch.check("a second tab opened on A, ready")


def test_switching_on_desktop(app, journey_registry, pictures, report):
    url, log = app
    with chromium() as browser:
        args = {"viewport": {"width": 1600, "height": 1000}}
        page = browser.new_page(**args)
        watch = Watch(page, log, SHOTS, "switching")
        with watch.failing():
            watch.open(url)
            switching_journey(Person(page, watch, journey_registry), journey_registry, pictures, url, log, browser,
                              report, **args)


def test_switching_on_a_dark_phone(app, journey_registry, pictures, report):
    url, log = app
    with chromium() as browser:
        args = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
                "color_scheme": "dark"}
        page = browser.new_page(**args)
        watch = Watch(page, log, SHOTS, "switching-phone", contrast=True)
        with watch.failing():
            watch.open(url + "?__theme=dark")
            box = page.locator("#question").bounding_box()
            assert box["y"] + box["height"] <= 844, box  # the message box on the first screen
            switching_journey(Person(page, watch, journey_registry), journey_registry, pictures, url, log, browser,
                              report, **args)


@pytest.fixture(scope="module")
def report_pdf(tmp_path_factory):
    from .documents import make_pdf

    return make_pdf(tmp_path_factory.mktemp("documents") / "report.pdf", pages=3)


def reader_journey(person: Person, spec, document: Path, page_by_page: bool = False) -> None:
    """Issue 39's journey for one document reader: its task picker fills the message box with its checkpoint's own
    prompt; a PDF's first page at the family's dpi; the answer (held to a hand-made one of known coordinates) shown
    as a document (a heading and a table rendered, the raw answer one click away), its boxes in the page's pixels
    in the box table and drawn on the page, and what the page cost (text tokens out per vision token in)."""
    page, watch = person.page, person.watch
    adapter = families.get(spec.family)
    person.pick(spec)
    assert page.locator("#task").is_visible()
    chosen = next((t for t in adapter.tasks if t.prompt and "{what}" not in t.prompt), adapter.tasks[0])
    page.locator("#task input").click()
    page.get_by_role("option", name=chosen.name, exact=True).click()
    person.wait("p => document.querySelector('#question textarea').value === p", chosen.prompt, 10)
    watch.check(f"{spec.name}: the task {chosen.name!r} filled the message box")
    person.attach(document)
    pages = page.locator("#slider-pages textarea, #slider-pages input").first
    pages.fill("1")
    pages.press("Enter")
    person.settle()
    dpi = adapter.document_dpi
    person.wait("d => new RegExp('1 page at ' + d + ' dpi').test(document.querySelector('#budget').innerText)", dpi,
                30)
    row = next(r for r in page.locator("#image-table [role=row]").all_inner_texts() if document.name in r)
    sizes = [tuple(map(int, m)) for m in re.findall(r"(\d+)x(\d+)", row)]
    orig, processed = sizes[0], sizes[1]  # "1653x2339 at 200 dpi → 532x756", then the grid "27x19"
    watch.check(f"{spec.name}: page 1 at {dpi} dpi, its cost before sending")
    person.ask()
    bot = page.locator("#chat .bot").filter(has=page.locator("h1")).last
    assert "Quarterly report" in bot.locator("h1").inner_text() and bot.locator("table").count() == 1
    assert page.get_by_text("Raw answer").count() >= 1  # the answer as written, one click away
    found = [list(map(float, r.split()[-4:])) for r in page.locator("#boxes [role=row]").all_inner_texts()[1:]]
    grounding = adapter.grounding
    for (x1, y1, x2, y2), box in zip(expected_boxes(grounding.parse(READER_ANSWERS[spec.name])), found, strict=True):
        if grounding.space == "relative":
            sx, sy = orig[0] / grounding.scale, orig[1] / grounding.scale
        else:
            sx, sy = orig[0] / processed[0], orig[1] / processed[1]
        assert box == pytest.approx([x1 * sx, y1 * sy, x2 * sx, y2 * sy], abs=0.06), (box, orig, processed)
    assert re.search(r"text tokens out per vision token in: [\d,]+ / [\d,]+ = [\d.]+", person.stats()), person.stats()
    watch.check(f"{spec.name}: read as a document, its boxes on the page, its cost")
    if page_by_page:
        read_page_by_page(person, spec, document, chosen.prompt, found)
    person.clear()
    watch.check(f"{spec.name}: cleared")


def read_page_by_page(person: Person, spec, report_pdf: Path, prompt: str, one_page: list[list[float]]) -> None:
    """Two pages read each on its own: each page's part as a document under its heading, each page's boxes drawn on
    that page (a picture each) and listed by page, on the same pixels as the page read alone."""
    page, watch = person.page, person.watch
    person.clear()  # (a request per page holds the conversation before it: the page read alone would be a second)
    person.attach(report_pdf, text=prompt)
    pages = page.locator("#slider-pages textarea, #slider-pages input").first
    pages.fill("1-2")
    pages.press("Enter")
    person.settle()
    page.locator("#slider-each_page input[type=checkbox]").click()
    person.settle()
    person.wait("() => /each page is its own request/.test(document.querySelector('#rendered-prompt').innerText)",
                timeout_s=30)
    pictures = page.locator("#chat .bot img").count()
    person.ask()
    bot = page.locator("#chat .bot").filter(has_text="page 2 of report.pdf").last
    text = bot.inner_text()
    assert text.index("page 1 of report.pdf") < text.index("page 2 of report.pdf"), text
    assert bot.locator("h1").count() == 2 and bot.locator("table").count() == 2, text  # each page as a document
    person.wait("n => document.querySelectorAll('#chat .bot img').length >= n", pictures + 2, 30)  # a picture a page
    rows = page.locator("#boxes [role=row]").all_inner_texts()[1:]
    assert [r.split(":")[0].strip() for r in rows] == ["page 1"] * len(one_page) + ["page 2"] * len(one_page), rows
    assert [list(map(float, r.split()[-4:])) for r in rows] == one_page * 2  # the same pages: the same pixels
    watch.check(f"{spec.name}: two pages read each on its own, each page's boxes on it")
    page.locator("#slider-each_page input[type=checkbox]").click()
    pages.fill("")
    pages.press("Enter")
    person.settle()


def expected_boxes(found) -> list[tuple[float, ...]]:
    return [f.box for f in found if f.box is not None]


def test_document_readers_read_a_page(app, journey_registry, report_pdf, tmp_path):
    """Each output format's tiny reader (issue 39, item 6), desktop: a PDF's first page (DeepSeek-OCR: a small page's,
    ``SMALL_PAGE_READERS``)."""
    from .documents import make_pdf

    small_page = make_pdf(tmp_path / "card.pdf", pages=1, size_pt=(300, 200))
    url, log = app
    readers = [m for m in journey_registry.models if m.name in READER_ANSWERS]
    assert readers, "no reader in the registry"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        watch = Watch(page, log, SHOTS, "reader")
        with watch.failing():
            watch.open(url)
            for i, spec in enumerate(readers):  # (the first also page by page)
                reader_journey(Person(page, watch, journey_registry), spec,
                               small_page if spec.name in SMALL_PAGE_READERS else report_pdf, page_by_page=i == 0)


# --- a model that listens (last: its engines then run, and a new tab opens on the model whose engine runs) ---


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """The fake microphone's WAV (3 s at 48 kHz, stereo), a 45-s clip at 44.1 kHz and a file that is no clip."""
    from .conftest import make_clip_bytes

    folder = tmp_path_factory.mktemp("clips")
    found = {"microphone": folder / "microphone.wav", "long": folder / "long.wav", "bad": folder / "broken.wav"}
    found["microphone"].write_bytes(make_clip_bytes(3.0))
    found["long"].write_bytes(make_clip_bytes(45.0, 44_100))
    found["bad"].write_bytes(b"RIFF\x00\x00\x00\x00WAVE" + bytes(64))
    return found


def test_a_model_that_listens(app, journey_registry, clips, pictures, report):
    """Desktop: the listening journey for every tiny model that takes clips; then a dark phone, for the first."""
    from .browser import fake_microphone

    url, log = app
    t0 = time.monotonic()
    with chromium(*fake_microphone(clips["microphone"])) as browser:
        for name, page_args in (("desktop", {"viewport": {"width": 1600, "height": 1000}}),
                                ("dark-phone", {"viewport": {"width": 390, "height": 844}, "is_mobile": True,
                                                "has_touch": True, "color_scheme": "dark"})):
            context = browser.new_context(permissions=["microphone"], **page_args)
            page = context.new_page()
            watch = Watch(page, log, SHOTS, f"listening-{name}", contrast=name == "dark-phone")
            person = Person(page, watch, journey_registry)
            with watch.failing():
                watch.open(url + ("?__theme=dark" if name == "dark-phone" else ""))
                # (the phone: the first model only; each model's journey is a desktop's)
                for spec in listening_models(journey_registry)[:None if name == "desktop" else 1]:
                    listening_journey(person, spec, clips, pictures[1])
                    person.no_overflow()
            context.close()
    report(f"listening journey: {len(listening_models(journey_registry))} models, desktop and dark phone, in "
           f"{time.monotonic() - t0:.0f} s")
