"""Remote turns: what a conversation's turns 2 and 3 send to a `vllm serve` server, and their first token, with
its pictures sent again as bytes each time against sent by reference (their content hash alone).

    python -m bench.remote_turns [--url URL] [--conversations N] [--out docs/remote-turns.md]

Without ``--url`` it starts vLLM's OpenAI server for the tiny Qwen2.5-VL model with the remote panels' flags (the
app's engine arguments). Each conversation has three turns, two new pictures (640x480 with a photo's grain, lossless PNG on the wire) in
the first; each turn is one question through the app's chat service to the endpoint entry: the server's render
(the panels) and the streamed answer. The two ways alternate, each with its own remote engine (what it has sent);
bytes are the request bodies the app posted in the turn, counted on the wire (httpx's request hook).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry, spec_for_endpoint
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, ChatService, Delta, Done, Failed, Turn
from vlm_demo.settings import Settings

import numpy as np
from PIL import Image

from .common import IMAGE_SIZE, machine, picture

MODEL = "tiny-qwen2.5-vl"
TURNS = ("Describe these two pictures.", "Which one is brighter?", "And what colours do they share?")
WAYS = {"bytes": False, "by reference": True}
"""Each way by its ``Settings.remote_media_by_reference``."""


def photo(i: int) -> Image.Image:
    """Picture ``i`` with a photo's grain: as a lossless PNG about the size a 640x480 photo's is (the bench's flat
    pictures compress to a few kilobytes)."""
    noise = np.random.default_rng(i).normal(128, 48, (IMAGE_SIZE[1], IMAGE_SIZE[0])).clip(0, 255)
    return Image.blend(picture(i), Image.fromarray(noise.astype(np.uint8)).convert("RGB"), 0.35)


def _name(model: str, way: str) -> str:
    return f"{model}-{way.replace(' ', '-')}"


async def _turn(service: ChatService, model: str, turns: tuple[Turn, ...], sent: list[int]) -> dict:
    """One turn: its first-token time, the bytes posted, the answer and the server's cached prompt tokens."""
    sent.clear()
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=16, ignore_eos=True)
    t0, ttft = time.perf_counter(), 0.0
    async for event in service.chat(ChatRequest(model=model, turns=turns, sampling=sampling)):
        if isinstance(event, Delta) and not ttft:
            ttft = time.perf_counter() - t0
        elif isinstance(event, Failed):
            raise RuntimeError(event.message)
        elif isinstance(event, Done):
            return {"ttft_s": ttft, "bytes": sum(sent), "requests": len(sent), "answer": event.answer,
                    "cached_tokens": event.figures.cached_tokens, "prompt_tokens": event.figures.prompt_tokens}
    raise RuntimeError("the service ended without Done")


async def measure(url: str, conversations: int) -> dict[str, list[list[dict]]]:
    """``conversations`` three-turn conversations each way, alternating; per way, per conversation, per turn."""
    base = Settings.from_env()
    registry = load_registry(base.models_file)
    spec = dataclasses.replace(spec_for_endpoint(registry, url, MODEL), name=f"remote-{MODEL}")
    out: dict[str, list[list[dict]]] = {way: [] for way in WAYS}
    services, hooks = {}, {}
    for way, by_reference in WAYS.items():
        settings = dataclasses.replace(base, remote_media_by_reference=by_reference)
        services[way] = ChatService(registry.with_model(dataclasses.replace(spec, name=_name(spec.name, way))),
                                    EngineManager(settings), settings)
        hooks[way] = []
    number = 5_000
    for i in range(conversations + 1):  # the first round warms both ways up and is not counted
        for way in (list(WAYS) if i % 2 == 0 else list(reversed(WAYS))):
            service, sent = services[way], hooks[way]
            model = _name(spec.name, way)
            engine = await service.engines.get(service.registry.get(model))
            client = engine._client()

            async def count(request, sent=sent) -> None:
                sent.append(len(request.content))

            client.event_hooks["request"] = [count]
            images = (photo(number), photo(number + 1))
            number += 2
            turns: tuple[Turn, ...] = ()
            rows = []
            for k, question in enumerate(TURNS):
                turns = (*turns, Turn("user", question, {"image": images} if k == 0 else {}))
                row = await _turn(service, model, turns, sent)
                rows.append({"turn": k + 1, **{key: v for key, v in row.items() if key != "answer"}})
                turns = (*turns, Turn("assistant", row["answer"]))
            if i:
                out[way].append(rows)
    return out


def report(data: dict[str, list[list[dict]]], seconds: float) -> str:
    lines = ["# Remote turns: pictures sent again as bytes, or by reference", "",
             f"`python -m bench.remote_turns`, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
             f"{seconds:.0f} s. Machine: {_machine()}.", "",
             "The app in front of `vllm serve` (tiny Qwen2.5-VL, the remote panels' flags), three-turn conversations "
             "with two new 640x480 pictures with a photo's grain in the first turn; each turn is the server's render (the panels) and the "
             "streamed answer (16 tokens). Bytes: the request bodies the app posted in the turn; p50 over "
             f"{len(next(iter(data.values())))} conversations each way, the ways alternating.", "",
             "| turn | bytes sent, as bytes | bytes sent, by reference | TTFT as bytes (ms) | TTFT by reference (ms) "
             "| by reference / as bytes (TTFT) |", "|---:|---:|---:|---:|---:|---:|"]
    for turn in range(len(TURNS)):
        row = {way: [talk[turn] for talk in talks] for way, talks in data.items()}
        sent = {way: statistics.median(r["bytes"] for r in rows) for way, rows in row.items()}
        ttft = {way: statistics.median(r["ttft_s"] for r in rows) * 1000 for way, rows in row.items()}
        lines.append(f"| {turn + 1} | {sent['bytes']:,.0f} | {sent['by reference']:,.0f} | {ttft['bytes']:.0f} | "
                     f"{ttft['by reference']:.0f} | {ttft['by reference'] / ttft['bytes']:.2f} |")
    return "\n".join(lines) + "\n"


def _machine() -> str:
    m = machine()
    return f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, load average {m['load_average'][0]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="a running server for the tiny Qwen2.5-VL (else one is started)")
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--out", type=Path, default=None, help="write the report here (else print it)")
    args = p.parse_args()
    t0 = time.perf_counter()
    server = None
    if args.url is None:
        from tests.vllm_server import PLAIN, SCALE_OUT_FLAGS, launch, stop, wait_ready

        settings = Settings.from_env()
        spec = load_registry(settings.models_file).get(MODEL)
        log = Path(tempfile.mkdtemp(prefix="remote-turns-")) / "serve.log"
        server = launch(spec, EngineManager(settings).model_path(spec), settings, log, SCALE_OUT_FLAGS, module=PLAIN)
        asyncio.run(wait_ready(server))
    try:
        data = asyncio.run(measure(args.url or server.url, args.conversations))
    finally:
        if server is not None:
            stop(server.proc)
    text = report(data, time.perf_counter() - t0)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
