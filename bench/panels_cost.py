"""The CPU one question's ``/panels`` event costs the app's server, with Export closed (the page's default: Export is
built when it opens) and open (what every question paid before): the panels drawn (``rendered_view``), Export built
(``export_view``: every picture a PNG data URL, the JSON, curl and Python), Gradio's postprocess of the event's outputs
and the JSON of the message the browser gets; measured in this process on the real page (vLLM's renderer renders
each question; no engine starts).

    python -m bench.panels_cost [--questions 5] [--out docs]

Each question has a picture of its own (nothing cached from the one before), as a person's next question does.
Prints one table row per kind of question: CPU milliseconds and megabytes sent per question, Export closed and open;
with ``--out``, writes them as the section ``report.PANELS_HEADING`` of that folder's ``benchmark.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from gradio.state_holder import SessionState
from PIL import Image, ImageFilter

from vlm_demo.engine import EngineManager
from vlm_demo.intake import DocumentOptions, load_document
from vlm_demo.profile import load_registry
from vlm_demo.service import ChatRequest, ChatService, Turn, page_requests
from vlm_demo.settings import Settings
from vlm_demo.ui.app import build_page
from vlm_demo.ui.contract import PANEL_OUTPUTS
from vlm_demo.ui.handlers import NO_EXPORT
from vlm_demo.ui.panels import export_view, rendered_view

from .common import picture
from .documents import make_document
from .report import PANELS_HEADING, write_section

MODEL = "tiny-qwen2.5-vl"


def photo(i: int) -> Image.Image:
    """A 640x480 picture that compresses as a camera's does (PNG about 0.6 MB): soft shapes under grain."""
    base = picture(i).filter(ImageFilter.GaussianBlur(6))
    grain = Image.effect_noise((640, 480), 48).convert("RGB")
    return Image.blend(base, grain, 0.35)


async def question_cost(service, demo, page, fn, request: ChatRequest, export: bool) -> tuple[float, int]:
    """CPU seconds and bytes of one question's ``/panels`` event for ``request``."""
    if request.each_page:
        rendered = [await service.inspect(one, start_engine=False) for _, one in page_requests(request)]
        inspection = rendered[0]
    else:
        inspection, rendered = await service.inspect(request, start_engine=False), []
    state = SessionState(demo)
    t0 = time.process_time()
    view = rendered_view(service, request, inspection, rendered)
    values = {name: view[name] for name in PANEL_OUTPUTS} | (export_view(service, request) if export else NO_EXPORT)
    data = await demo.postprocess_data(fn, page.values(**values), state)
    message = json.dumps({"msg": "process_completed", "output": {"data": data}}, default=str)
    return time.process_time() - t0, len(message)


async def run(questions: int) -> list[dict]:
    settings = Settings.from_env()
    service = ChatService(load_registry(settings.models_file), EngineManager(settings), settings)
    demo, page = build_page(service, MODEL)
    fn = next(fn for fn in demo.fns.values() if fn.api_name == "panels")
    with tempfile.TemporaryDirectory() as folder:
        pdf = make_document(Path(folder) / "report.pdf", 3 * (questions + 2))
        kinds = {
            "one picture (the benchmark's, 640x480)": lambda i: (picture(i),),
            "one photo-like picture (640x480)": lambda i: (photo(i),),
            "a 3-page PDF, page by page (144 dpi)": lambda i: load_document(
                pdf, settings, DocumentOptions(dpi=144, pages=f"{3 * i + 1}-{3 * i + 3}")),
        }
        rows = []
        for kind, media in kinds.items():
            await question_cost(service, demo, page, fn, _request(media(questions + 1)), True)  # (warm-up)
            figures = {}
            for export in (False, True):
                costs = [await question_cost(service, demo, page, fn, _request(media(i)), export)
                         for i in range(questions)]
                figures[export] = (sum(c for c, _ in costs) / questions, sum(b for _, b in costs) / questions)
            rows.append({"question": kind, "closed_ms": figures[False][0] * 1000, "open_ms": figures[True][0] * 1000,
                         "closed_mb": figures[False][1] / 1e6, "open_mb": figures[True][1] / 1e6})
    return rows


def _request(media) -> ChatRequest:
    items = tuple(media)
    return ChatRequest(model=MODEL, turns=(Turn("user", "Describe it.", {"image": items}),),
                       each_page=len(items) > 1)


def table(rows: list[dict]) -> str:
    lines = ["| question | CPU, Export closed (ms) | CPU, Export open, as every question before (ms) | closed / open "
             "| sent, closed (MB) | sent, open (MB) |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['question']} | {r['closed_ms']:.1f} | {r['open_ms']:.1f} | {r['closed_ms'] / r['open_ms']:.2f} | "
              f"{r['closed_mb']:.2f} | {r['open_mb']:.2f} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=5)
    p.add_argument("--out", type=Path, help="a folder whose benchmark.md gets the section (docs)")
    args = p.parse_args()
    rows = asyncio.run(run(args.questions))
    print(table(rows))
    if args.out:
        write_section(args.out, PANELS_HEADING, f"python -m bench.panels_cost --questions {args.questions}", (
            "The CPU the app's process spends on one question's `/panels` event (the panels drawn, Export built where "
            "it is open, Gradio's postprocess and the message's JSON), each question with a picture of its own, and "
            "what the message carries. Export is built only when it is open or `/export` is asked: before, every "
            "question built it (every picture a PNG data URL)."), table(rows))

if __name__ == "__main__":
    main()
