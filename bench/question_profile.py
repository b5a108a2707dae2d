"""Where one question's CPU goes in the app's process, event by event, as Chromium sends them
(``bench.browser_load``'s users: the same requests, held to Chromium's by ``tests/test_app.py``): one tab asks
``--questions`` questions (a picture attached, the question, Enter; Clear before each), each event sent on its own and
waited for, the app process's CPU read around it (its engine's processes are not counted: they are the engine's).
The chat is split where its first answer text arrives: before it (the queue, vLLM's render, the first update) and
after it (the streamed updates to the last, and their delivery).

    python -m bench.question_profile [--questions 8] [--max-tokens 256] [--app-root DIR] [--out docs]

``--app-root``: another checkout's app (the same users), for a before/after in one run; with ``--out``, the table
goes into that folder's ``benchmark.md`` as the section ``report.PROFILE_HEADING``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from vlm_demo.settings import STATUS_EVERY_S, Settings

from . import browser_load as bl
from .common import write_pictures
from .report import PROFILE_HEADING, write_section
from .run import ROOT, AppServer

MODEL = "tiny-qwen2.5-vl"


class Meter:
    """The app process's CPU (all its threads) around each step, by step's name."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.steps: dict[str, list[float]] = {}
        self.updates: list[int] = []

    def now(self) -> float:
        """CPU seconds so far, to the nanosecond: each thread's time on a CPU (``/proc/PID/task/*/schedstat``; the
        process's own counters tick at 10 ms, most of an event's cost)."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # (a thread that ended meanwhile)
        return total / 1e9

    def add(self, name: str, cpu: float) -> None:
        self.steps.setdefault(name, []).append(cpu)


async def completed(client, page, tab, event: str) -> list:
    """Wait for a queued event of the tab; its outputs (and the number of streamed updates before it)."""
    updates = 0
    async for msg in bl.messages(client, page, tab.session):
        if msg.get("event_id") != event:
            continue
        if msg.get("msg") == "process_generating":
            updates += 1
        if msg.get("msg") == "process_completed":
            if not msg.get("success", True):
                raise RuntimeError(f"the app answered with an error: {str(msg.get('output'))[:300]}")
            return [updates, msg["output"]["data"]]
    raise RuntimeError("the stream ended before the event completed")


async def question(client, page: bl.Page, tab: bl.Tab, meter: Meter, first: bool) -> None:
    """One question, each event on its own, its CPU by event into ``meter``."""
    async def step(name: str, work):
        t0 = meter.now()
        out = await work
        meter.add(name, meter.now() - t0)
        return out

    async def queued(name: str, fn_index: int, data: list) -> list:
        async def run():
            return await completed(client, page, tab, await bl.join(client, page, tab.session, fn_index, data))
        return await step(name, run())

    async def box(name: str, message) -> None:
        outputs = await step(name, bl.predict(client, page, tab.session, page.box_index, [message, tab.attached]))
        attached = outputs[page.box_outputs.index(page.attached_id)]
        if isinstance(attached, str) and attached != tab.attached:
            tab.attached = attached
            data = [message if i == 0 else v for i, v in enumerate(page.inspect_data)]
            await queued(f"{name}: the files' change (the panels follow, queued)", page.attached_index, data)

    if not first:
        await queued("Clear (queued)", page.clear_index, [])
    data = bl._swap(page.data, await step("upload", page.upload(client)))
    message = data[0]
    await box("attach: the box's change", {**message, "text": ""})
    await box("attach: the box's change (the second)", {**message, "text": ""})
    await box("the text typed: the box's change", message)
    # the chat: to its first text, then the rest of its stream
    t0 = meter.now()
    chat = await bl.join(client, page, tab.session, page.fn_index, data)
    updates, rendered, mark = 0, False, None
    async for msg in bl.messages(client, page, tab.session):
        if msg.get("event_id") != chat:
            continue
        if msg.get("msg") == "process_generating":
            updates += 1
            rendered = rendered or page.rendered_id in (msg["output"].get("changed_state_ids") or ())
            if mark is None and updates >= 2:  # (the first update is the question's render; the next, text)
                mark = meter.now()
                meter.add("chat: to the first answer text (queue, render, first updates)", mark - t0)
        elif msg.get("msg") == "process_completed":
            if not msg.get("success", True):
                raise RuntimeError(f"the chat failed: {str(msg.get('output'))[:300]}")
            break
    end = meter.now()
    meter.add("chat: the rest of the stream (updates, delivery)", end - (mark or t0))
    meter.updates.append(updates)
    if not rendered:
        raise RuntimeError("the chat's render state did not change")
    for fn_index, queue, args in page.on_render:
        if queue:
            await queued("the render: the panels (queued)", fn_index, args)
        else:
            box_value = (await step("the render: the box emptied", bl.predict(client, page, tab.session, fn_index,
                                                                                args)))[0]
            if not (isinstance(box_value, dict) and box_value.get("__type__") == "update"):
                await box("the box emptied: its change", box_value)
    for fn_index, _, args in page.after_chat:
        await step("after the answer: the status line", bl.predict(client, page, tab.session, fn_index, args))
    await step("the status timer's tick (every 5 s)", bl.predict(client, page, tab.session, page.tick_index,
                                                                 page.tick_data))


async def profile(url: str, pid: int, picture: Path, questions: int, max_tokens: int) -> dict:
    page = bl.Page(url, MODEL, str(picture), max_tokens)
    meter = Meter(pid)
    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        tab = bl.Tab()
        await question(client, page, tab, Meter(pid), True)  # warm-up (first of the tab, not counted)
        idle0, t0 = meter.now(), time.perf_counter()
        await asyncio.sleep(2.0)
        idle = (meter.now() - idle0) / (time.perf_counter() - t0)
        for _ in range(questions):
            await question(client, page, tab, meter, False)
    steps = {name: statistics.median(v) * 1000 for name, v in meter.steps.items()}
    return {"steps_ms": steps, "per_question_ms": sum(steps.values()), "updates": statistics.median(meter.updates),
            "idle_ms_per_s": idle * 1000, "questions": questions, "max_tokens": max_tokens}


def run_profile(root: Path, questions: int, max_tokens: int, work: Path) -> dict:
    interval = Settings.from_env().ui_update_interval_s
    server = AppServer(MODEL, interval, work, root)
    try:
        server.load_model(MODEL)
        picture = write_pictures(work / "pictures", 1)[0]
        return asyncio.run(profile(server.url, server.proc.pid, picture, questions, max_tokens))
    finally:
        server.close()


def table(runs: dict[str, dict]) -> str:
    names = list(dict.fromkeys(n for r in runs.values() for n in r["steps_ms"]))
    head = "| event (in the order sent) | " + " | ".join(f"{k}: CPU ms" for k in runs) + " |"
    rows = [head, "|---|" + "---:|" * len(runs)]
    for name in names:
        rows.append(f"| {name} | " + " | ".join(f"{r['steps_ms'][name]:.1f}" if name in r["steps_ms"] else "-"
                                                  for r in runs.values()) + " |")
    rows.append("| **one question** | " + " | ".join(f"**{r['per_question_ms']:.1f}**" for r in runs.values()) + " |")
    rows.append("| streamed updates a question | " + " | ".join(f"{r['updates']:.0f}" for r in runs.values()) + " |")
    rows.append("| idle app, CPU ms a second | " + " | ".join(f"{r['idle_ms_per_s']:.1f}" for r in runs.values())
                + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--app-root", type=Path, default=None, help="another checkout's app, profiled first as 'before'")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="vlm-profile-") as tmp:
        if args.app_root:
            runs["before"] = run_profile(args.app_root.resolve(), args.questions, args.max_tokens, Path(tmp))
        runs["now" if not args.app_root else "after"] = run_profile(ROOT, args.questions, args.max_tokens, Path(tmp))
    text = table(runs)
    print(text)
    if args.out:
        about = (f"One tab of `bench.browser_load` (the requests Chromium sends for a question), {args.questions} "
                 f"questions of {args.max_tokens} tokens after a warm-up, each event on its own and waited for; the "
                 "app process's CPU around each (median; its engine's processes not counted). The status timer "
                 f"ticks every {STATUS_EVERY_S[1]:.0f} s whatever is asked; its row is one tick.")
        command = "python -m bench.question_profile" + (f" --app-root {args.app_root}" if args.app_root else "")
        write_section(args.out, PROFILE_HEADING, command + f" --questions {args.questions}", about, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
