"""The page in a real browser: Debian's Chromium, headless, driven by Playwright (no browser download), and the
checks every step of a person's way through the page must pass (``Watch``)."""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"

PANELS = ("settings-panel", "prompt-panel", "chat-panel")
"""The page's three columns."""

LONG_TASK_MS = 500
"""Longest a browser task may take after a click (a page frozen longer than this feels broken). The freezes this
caught were 2-6 s (an engine starving the browser, a whole answer drawn at once) and 0.5-0.8 s at each streamed chunk
of a long answer (Gradio's run history, read and written whole in the browser's storage per chunk; now off). Without
them no step's task reaches 100 ms here. The page's liveness while an answer streams is held to 200 ms apart (the
switching journey)."""

MIN_CONTRAST = 4.5
"""WCAG AA contrast for text."""

LOG_PROBLEMS = re.compile(r"Traceback|\bERROR\b|force killing")
"""A line of the app's log that is a bug, whatever the page shows (an engine vLLM had to kill is one too)."""


@contextlib.contextmanager
def chromium(*args: str):
    """Debian's Chromium, headless, driven by Playwright (no browser download); ``args``: more of its flags
    (``fake_microphone``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", *args])
        try:
            yield browser
        finally:
            browser.close()


def fake_microphone(wav: Path) -> tuple[str, ...]:
    """Chromium's flags for a microphone that plays ``wav`` (a page's recording records it), allowed at once."""
    return ("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}")


OBSERVE_JS = """() => {
    window.longTasks = [];
    try {
        new PerformanceObserver(list => { for (const e of list.getEntries()) window.longTasks.push(
            {start: e.startTime, ms: e.duration}); }).observe({type: 'longtask', buffered: true});
    } catch (e) {}
}"""

CONTRAST_JS = """([root, minimum]) => {
    // Every element with text of its own inside ``root``: its text colour against the background it is drawn on
    const rgba = s => { const m = (s.match(/[\\d.]+/g) || []).map(Number); return m.length === 3 ? [...m, 1] : m; };
    const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92
        : Math.pow((v + 0.055) / 1.055, 2.4); }).reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
    const over = (top, below) => { const a = top[3]; return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)); };
    const background = el => {  // the first opaque background up the tree, with the translucent ones over it
        const layers = [];
        for (let e = el; e; e = e.parentElement) {
            const c = rgba(getComputedStyle(e).backgroundColor);
            if (c.length === 4 && c[3] > 0) { layers.push(c); if (c[3] >= 0.99) break; }
        }
        let fill = document.body.classList.contains('dark') ? [11, 15, 25] : [255, 255, 255];
        for (const c of layers.reverse()) fill = over(c, fill);
        return fill;
    };
    const bad = [];
    for (const el of document.querySelectorAll(root + ' *')) {
        const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
        if (!own || !el.getClientRects().length) continue;
        const style = getComputedStyle(el);
        if (style.visibility === 'hidden' || parseFloat(style.opacity) < 0.1 || el.closest('[disabled], .disabled,'
            + ' button:disabled, [aria-hidden=true], .hide, .hidden')) continue;
        const bg = background(el), fg = over(rgba(style.color), bg);
        const [a, b] = [lum(fg), lum(bg)];
        const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        if (ratio < minimum) bad.push(`${el.tagName.toLowerCase()}.${[...el.classList].join('.')} "`
            + `${el.textContent.trim().slice(0, 30)}": ${ratio.toFixed(2)}`);
    }
    return bad;
}"""

SPLIT_WORDS_JS = """() => {
  // Each number in a cell of the page's tables ("640x480", "45-435", "(268)") and each word of a header, drawn on more
  // than one line: the words as "cell: word" (a name or token too long for its column may wrap)
  const broken = [];
  for (const cell of document.querySelectorAll(':is(#image-table, #boxes) :is([role=gridcell], th)')) {
    if (!cell.getClientRects().length) continue;
    const header = cell.tagName === 'TH';
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.textContent.matchAll(/[^\\s-]+/g)) {  // (a range may break after its hyphen)
        if (!header && !/^\\(?\\d[\\d.,x]*\\)?$/.test(m[0])) continue;
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (tops.size > 1) broken.push(`${cell.innerText.trim().slice(0, 40)}: ${m[0]}`);
      }
    }
    const cut = [cell, ...cell.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1  // a word wider than
        && getComputedStyle(e).overflowX !== 'visible');                                            // its column, hidden
    if (cut) broken.push(`${cell.innerText.trim().slice(0, 40)}: cut off`);
  }
  return broken;
}"""
"""The numbers of the page's tables and the words of their headers drawn across lines, and cells whose text is cut off
(none may be)."""
FAILURE_JS = """() => ['engine-state', 'budget', 'stats', 'message-note'].map(id => {
  const e = document.getElementById(id);
  return `#${id}: ${e ? JSON.stringify(e.innerText.trim().slice(0, 400)) : '(none)'}`;
}).concat([`settings sent: ${JSON.stringify((document.querySelector('#rendered-prompt .sent-settings') || {}).innerText || '')}`,
           `controls: ${JSON.stringify([...document.querySelectorAll('#settings-panel [id^=slider-] input, #settings-panel [id^=slider-] textarea')]
              .filter(e => e.type !== 'range').map(e => `${e.closest('[id^=slider-]').id}=${e.type === 'checkbox' ? e.checked : e.value}`))}`])
 .join('\\n')"""
"""What a failed journey's report adds about the page (CI keeps its log, not the screenshots)."""
FAILURE_LOG_LINES = 30
ERRORS_JS = """() => [...document.querySelectorAll('.toast-body.error, span.error')]
    .filter(e => e.getClientRects().length).map(e => e.closest('.toast-body')
        ? e.closest('.toast-body').innerText.trim().slice(0, 200) : 'error badge: ' + e.innerText.trim())"""


@dataclass
class Watch:
    """The checks after every step of a journey: no error badge or toast on the page, no console error, no
    ``Traceback`` or ``ERROR`` in the app's log, no browser task over ``LONG_TASK_MS`` since the step began, and
    (where asked) text contrast of at least ``MIN_CONTRAST`` for every element inside the panels; a screenshot of
    each step goes to ``shots``."""

    page: object
    log: Path
    """The app's log file."""
    shots: Path
    """Where each step's screenshot goes."""
    name: str
    """The journey's name (the screenshots' prefix)."""
    contrast: bool = False
    """Check the contrast after every step (else where a step asks)."""
    console: list[str] = field(default_factory=list)
    log_seen: int = 0
    steps: int = 0
    step_started: float = 0.0
    timings: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.log_seen = self.log.stat().st_size if self.log.exists() else 0

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.evaluate(OBSERVE_JS)
        self.page.locator("#question textarea").wait_for(timeout=60_000)
        self.page.wait_for_function("document.body.dataset.opened === 'yes'", timeout=30_000)  # on the tab's model
        self.begin()

    @contextlib.contextmanager
    def failing(self):
        """A screenshot of the page as it stood when the block failed (``<name>-failed.png``), and in the failure's
        report what CI's log alone would not show: the page's status, budget and stats lines, the settings sent and
        the app log's last lines."""
        try:
            yield
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.page.screenshot(path=str(self.shots / f"{self.name}-failed.png"), full_page=True)
            with contextlib.suppress(Exception):
                exc.add_note(self.page.evaluate(FAILURE_JS))
            with contextlib.suppress(Exception):
                exc.add_note("the app's log ends:\n" + "\n".join(
                    self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-FAILURE_LOG_LINES:]))
            raise

    def begin(self) -> None:
        """Start timing a step (long tasks count from here)."""
        self.step_started = self.page.evaluate("performance.now()")
        self.t0 = time.monotonic()

    def check(self, step: str, contrast: bool | None = None, errors_expected: bool = False) -> None:
        """The checks after ``step``; then the next step begins."""
        self.steps += 1
        self.timings.append((step, time.monotonic() - self.t0))
        self.page.wait_for_timeout(150)  # a toast or badge of the step's last event is drawn
        shot = self.shots / f"{self.name}-{self.steps:02d}-{re.sub(r'[^a-z0-9]+', '-', step.lower())}.png"
        self.page.screenshot(path=str(shot), full_page=True)
        where = f"{self.name}, after '{step}' (screenshot {shot.name})"
        if not errors_expected:
            shown = self.page.evaluate(ERRORS_JS)
            assert not shown, f"{where}: the page shows errors: {shown}"
        assert not self.console, f"{where}: browser console errors: {self.console}"
        problems = self.new_log_lines()
        assert not problems, f"{where}: the app's log says:\n" + "\n".join(problems[:40])
        long = [t for t in self.page.evaluate("window.longTasks || []")
                if t["start"] >= self.step_started and t["ms"] > LONG_TASK_MS]
        assert not long, f"{where}: the page froze: tasks of {[round(t['ms']) for t in long]} ms"
        kept = self.page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('gradio:run-history'))")
        assert not kept, f"{where}: the page keeps Gradio's run history ({kept}), rewritten at every streamed chunk"
        if contrast or (contrast is None and self.contrast):
            for panel in PANELS:
                bad = self.page.evaluate(CONTRAST_JS, [f"#{panel}", MIN_CONTRAST])
                assert not bad, f"{where}: text below {MIN_CONTRAST}:1 contrast in #{panel}: {bad[:10]}"
        self.begin()

    def new_log_lines(self) -> list[str]:
        """Lines of the app's log since the last look that are bugs (a traceback and what follows it)."""
        with open(self.log, encoding="utf-8", errors="replace") as f:
            f.seek(self.log_seen)
            text = f.read()
            self.log_seen = f.tell()
        lines = text.splitlines()
        first = next((i for i, line in enumerate(lines) if LOG_PROBLEMS.search(line)), None)
        return [] if first is None else lines[max(0, first - 2):]
