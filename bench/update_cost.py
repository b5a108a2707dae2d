"""The CPU one streamed page update costs the app's server: Gradio's work on the update the answer's stream yields
(each output's postprocess, the state and property updates, the diff against the last update, the JSON of the
message), measured in this process on the real page (no engine: the update is built as ``ui.stream`` builds it).

    python -m bench.update_cost [--tokens 32,256,1024] [--updates 200]

Prints one table row per answer length: CPU milliseconds per update, and the bytes the message carries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from gradio.state_holder import SessionState

from vlm_demo.conversation import Conversation, Exchange
from vlm_demo.service import Figures
from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry
from vlm_demo.service import ChatService, Turn
from vlm_demo.settings import Settings
from vlm_demo.ui.app import build_page
from vlm_demo.ui.stream import streaming_values, text_update
from vlm_demo.ui.answer import stats_data

from .common import picture

MODEL = "tiny-qwen2.5-vl"


def page():
    """The app's page (its Blocks, Page and the chat event's function), with no engine started."""
    settings = Settings.from_env()
    service = ChatService(load_registry(settings.models_file), EngineManager(settings), settings)
    demo, page = build_page(service, MODEL)
    return demo, page, next(fn for fn in demo.fns.values() if fn.api_name == "chat")


async def cost(tokens: int, updates: int) -> dict:
    """CPU per update of an answer ``tokens`` words long, streamed in ``updates`` updates (one picture asked)."""
    demo, view, fn = page()
    state = SessionState(demo)
    conversation = Conversation().ask(Exchange(Turn("user", "Describe this picture.", {"image": (picture(1),)})))
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
    return {"tokens": tokens, "updates": updates, "cpu_ms_per_update": cpu / updates * 1000,
            "bytes_per_update": sent / max(updates - 1, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="32,256,1024")
    p.add_argument("--updates", type=int, default=200)
    args = p.parse_args()
    print("| answer (words) | CPU per update (ms) | bytes per update |\n|---:|---:|---:|")
    for tokens in (int(t) for t in args.tokens.split(",")):
        row = asyncio.run(cost(tokens, args.updates))
        print(f"| {tokens} | {row['cpu_ms_per_update']:.2f} | {row['bytes_per_update']:.0f} |")


if __name__ == "__main__":
    main()
