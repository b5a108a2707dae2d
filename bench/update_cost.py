"""The CPU one streamed page update costs the app's server: Gradio's work on the update the answer's stream yields
(each output's postprocess, the state and property updates, the diff against the last update, the JSON of the
message), measured in this process on the real page (no engine: the update is built as ``ui.stream`` builds it).

    python -m bench.update_cost [--tokens 32,256,1024] [--updates 200] [--turns 1,5]

Prints one table row per answer length and turn (at turn N the conversation shows N pictures, one a question, as
the chat shows uploads: files): CPU milliseconds per update with each file moved once (the app's
``ui.server.files_moved_once``) and as Gradio 6.31 has it (every file checked twice an update), and the bytes the
message carries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from gradio import processing_utils
from gradio.state_holder import SessionState

from vlm_demo.conversation import Conversation, Exchange
from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry
from vlm_demo.service import ChatService, Figures, Turn
from vlm_demo.settings import Settings
from vlm_demo.ui.app import build_page
from vlm_demo.ui.answer import stats_data
from vlm_demo.ui.overlays import OVERLAYS, image_file
from vlm_demo.ui.server import FilesMovedOnce
from vlm_demo.ui.stream import streaming_values, text_update

from .common import picture
from .report import UPDATES_HEADING, write_section

MODEL = "tiny-qwen2.5-vl"
GRADIOS = processing_utils.async_move_files_to_cache
"""Gradio's own move of an event's files (before the app's ``files_moved_once``)."""


def page():
    """The app's page (its Blocks, Page and the chat event's function), with no engine started."""
    settings = Settings.from_env()
    service = ChatService(load_registry(settings.models_file), EngineManager(settings), settings)
    demo, page = build_page(service, MODEL)
    return demo, page, next(fn for fn in demo.fns.values() if fn.api_name == "chat")


def asked(turn: int) -> Conversation:
    """A conversation at its ``turn``-th question, each question with a picture of its own shown as a file (the
    earlier ones answered)."""
    conversation = Conversation()
    for i in range(1, turn + 1):
        image = picture(i)
        shown = (image_file(image, OVERLAYS), "Describe this picture.")
        conversation = conversation.ask(Exchange(Turn("user", "Describe this picture.", {"image": (image,)}), shown))
        if i < turn:
            conversation = conversation.with_last(answer=f"answer {i} " * 40, status="done")
    return conversation


async def cost(tokens: int, updates: int, turn: int = 1, once: bool = True) -> dict:
    """CPU per update of an answer ``tokens`` words long, streamed in ``updates`` updates, at question ``turn`` (as
    many pictures in the chat); ``once``: each file moved into the cache once (the app's), else as Gradio has it."""
    processing_utils.async_move_files_to_cache = FilesMovedOnce(GRADIOS) if once else GRADIOS
    demo, view, fn = page()
    state = SessionState(demo)
    conversation = asked(turn)
    shown = streaming_values(stats_data(None, "streaming"))
    words = [f"w{i}" for i in range(tokens)]
    cpu, sent = 0.0, 0
    for k in range(updates):
        answer = " ".join(words[: max(1, tokens * (k + 1) // updates)])
        conversation = conversation.with_last(answer=answer)
        update = text_update(view, shown, conversation, Figures(tokens=k + 1, tokens_per_s=100.0 + k))
        t0 = time.process_time()
        data = await demo.postprocess_data(fn, update, state)
        data = demo.handle_streaming_diffs(fn, data, "session", "run", final=False)
        message = json.dumps({"msg": "process_generating", "output": {"data": data}}, default=str)
        cpu += time.process_time() - t0
        sent += len(message) if k else 0
    return {"tokens": tokens, "turn": turn, "updates": updates, "cpu_ms_per_update": cpu / updates * 1000,
            "bytes_per_update": sent / max(updates - 1, 1)}


def table(rows: list[tuple[dict, dict]]) -> str:
    lines = ["| answer (words) | turn (pictures in the chat) | CPU per update (ms) | as Gradio has it (ms) | bytes per "
             "update |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {row['tokens']} | {row['turn']} | {row['cpu_ms_per_update']:.2f} | {before['cpu_ms_per_update']:.2f} | "
              f"{row['bytes_per_update']:.0f} |" for row, before in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="32,256,1024")
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--turns", default="1,5")
    p.add_argument("--out", type=Path, help="a folder whose benchmark.md gets the section (docs)")
    args = p.parse_args()
    rows = [tuple(asyncio.run(cost(tokens, args.updates, turn, once)) for once in (True, False))
            for tokens in (int(t) for t in args.tokens.split(",")) for turn in (int(t) for t in args.turns.split(","))]
    print(table(rows))
    if args.out:
        command = (f"python -m bench.update_cost --tokens {args.tokens} --updates {args.updates} --turns "
                   f"{args.turns}")
        write_section(args.out, UPDATES_HEADING, command, (
            "The CPU the app's process spends on one streamed update of an answer (Gradio's postprocess of the "
            "update's outputs, the diff, the message's JSON) at the first question and at the fifth (a picture a "
            "question, shown in the chat as files), with each file moved into the chat's cache once (the app's "
            "`ui.server.files_moved_once`) and as Gradio 6.31 has it (each file checked and copied twice an update), "
            "in one run."), table(rows))

if __name__ == "__main__":
    main()
