"""The load in this process, on one engine: the raw ``AsyncLLM`` and the app's chat service side by side.

Both paths drive the same engine with the same pictures and sampling, so their ratio is the service's cost.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry, resolve
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, ChatService, Delta, Done, Failed, Turn, to_openai_messages
from vlm_demo.settings import Settings

from .common import QUESTION, Load, Result, picture

_ids = itertools.count(1_000)  # picture numbers: every request gets a picture no other request had


class NoInspectionService(ChatService):
    """The chat service with the inspection left out (the inspector-overhead baseline)."""

    @staticmethod
    def _inspect(engine, rendered, request):  # type: ignore[override]
        return None


def _request(model: str, image, max_tokens: int) -> ChatRequest:
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True)
    return ChatRequest(model=model, turns=(Turn("user", QUESTION, {"image": (image,)}),), sampling=sampling)


async def _raw_one(llm: Any, prompt: dict[str, Any], image, max_tokens: int) -> tuple[float, int]:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    params = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
    t0 = time.perf_counter()
    ttft, n = 0.0, 0
    async for out in llm.generate({**prompt, "multi_modal_data": {"image": image}}, params, f"raw-{uuid.uuid4().hex}"):
        got = len(out.outputs[0].token_ids)
        if n == 0 and got:
            ttft = time.perf_counter() - t0
        n += got
    return ttft, n


async def _service_one(service: ChatService, model: str, image, max_tokens: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    ttft = 0.0
    async for event in service.chat(_request(model, image, max_tokens)):
        if isinstance(event, Delta) and not ttft:
            ttft = time.perf_counter() - t0
        elif isinstance(event, Done):
            return ttft or event.figures.ttft_s, event.figures.tokens
        elif isinstance(event, Failed):
            raise RuntimeError(event.message)
    raise RuntimeError("the service ended without Done")


async def _run_load(path: str, model: str, load: Load, one, distinct: bool = False) -> Result:
    shared = picture(0)
    images = [[picture(next(_ids)) if distinct else shared for _ in range(load.per_stream)]
              for _ in range(load.streams)]
    ttfts: list[float] = []
    tokens = 0

    async def stream(mine):
        nonlocal tokens
        for image in mine:
            ttft, n = await one(image, load.max_tokens)
            ttfts.append(ttft)
            tokens += n

    t0 = time.perf_counter()
    await asyncio.gather(*(stream(mine) for mine in images))
    wall = time.perf_counter() - t0
    return Result(path, model, load.streams, load.streams * load.per_stream, tokens, wall, ttfts)


TURNS = ("Describe these two pictures.", "Which one is brighter?", "And what colours do they share?")
"""The multi-turn conversation: two pictures in the first turn, then two questions about them."""


async def _raw_turn(llm: Any, engine: Any, turns: tuple[Turn, ...], images: list, max_tokens: int
                    ) -> tuple[float, str, int, int]:
    """One turn through the raw engine, as a ``vllm serve`` client sends it (the whole conversation again, its
    pictures too): time to first token, the answer, cached prompt tokens, prompt tokens."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    rendered = await engine.render(to_openai_messages(ChatRequest(model="", turns=turns)), {})
    params = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
    t0 = time.perf_counter()
    ttft, text, cached = 0.0, "", 0
    async for out in llm.generate({"prompt": rendered.prompt, "multi_modal_data": {"image": images}}, params,
                                  f"raw-{uuid.uuid4().hex}"):
        if not ttft and out.outputs[0].token_ids:
            ttft = time.perf_counter() - t0
        text += out.outputs[0].text
        cached = out.num_cached_tokens or cached
    return ttft, text, cached, len(rendered.prompt_token_ids)


async def _service_turn(service: ChatService, model: str, turns: tuple[Turn, ...], max_tokens: int
                        ) -> tuple[float, str, int, int]:
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    ttft = 0.0
    async for event in service.chat(ChatRequest(model=model, turns=turns, sampling=sampling)):
        if isinstance(event, Delta) and not ttft:
            ttft = time.perf_counter() - t0
        elif isinstance(event, Done):
            return ttft or event.figures.ttft_s, event.answer, event.figures.cached_tokens, event.figures.prompt_tokens
        elif isinstance(event, Failed):
            raise RuntimeError(event.message)
    raise RuntimeError("the service ended without Done")


async def conversations(service: ChatService, engine: Any, model: str, n: int, max_tokens: int = 32) -> dict:
    """``n`` conversations of three turns (two new pictures in the first) on each path, alternating: per turn,
    time to first token and the prompt tokens vLLM's prefix cache served."""
    out: dict[str, list[list[dict]]] = {"raw": [], "service": []}
    for i in range(n):
        for path in (("raw", "service") if i % 2 == 0 else ("service", "raw")):
            images = [picture(next(_ids)), picture(next(_ids))]  # new to the cache: turn 1 starts cold
            turns: tuple[Turn, ...] = ()
            rows = []
            for k, question in enumerate(TURNS):
                turns = (*turns, Turn("user", question, {"image": tuple(images)} if k == 0 else {}))
                if path == "raw":
                    ttft, answer, cached, prompt = await _raw_turn(engine._llm, engine, turns, images, max_tokens)
                else:
                    ttft, answer, cached, prompt = await _service_turn(service, model, turns, max_tokens)
                rows.append({"turn": k + 1, "ttft_s": ttft, "cached_tokens": cached, "prompt_tokens": prompt})
                turns = (*turns, Turn("assistant", answer))
            out[path].append(rows)
    return out


async def measure(model: str, loads: list[Load], inspector_pairs: int, distinct: Load | None = None,
                  log=print, conversation_runs: int = 2, warm: Load | None = None) -> tuple[list[Result], dict, dict]:
    """Raw engine and chat service under each load (every request asks about the same picture; after ``warm``
    on each, by default 4 streams of 2 questions), then time to first token with and without the inspection
    (``inspector_pairs`` single requests of each, alternating), then ``conversation_runs`` three-turn
    conversations on each path, then, if ``distinct`` is given, that load with a different picture per
    request."""
    settings = Settings.from_env()
    registry = load_registry(settings.models_file)
    engines = EngineManager(settings)
    service = ChatService(registry, engines, settings)
    bare = NoInspectionService(registry, engines, settings)
    spec = registry.get(model)
    try:
        # Inspect before the engine runs: vLLM's renderer alone (what `inspect`, Inspect only and Compare use
        # while no engine runs), then the way it was done before, starting the engine to render.
        first = _request(model, picture(0), 8)
        t0 = time.perf_counter()
        await service.inspect(first, start_engine=False)
        renderer_inspect_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine = await engines.get(spec)
        await service.inspect(first)
        engine_inspect_s = time.perf_counter() - t0
        log(f"  {model}: inspect with the renderer alone {renderer_inspect_s:.1f} s, starting the engine "
            f"{engine_inspect_s:.1f} s")
        llm = engine._llm  # the raw engine: the very AsyncLLM the service uses
        rendered = await engine.render(to_openai_messages(_request(model, picture(0), 8)),
                                       spec.default_mm_kwargs())
        prompt: dict[str, Any] = {"prompt": rendered.prompt}
        if spec.default_mm_kwargs():
            prompt["mm_processor_kwargs"] = spec.default_mm_kwargs()

        def raw(image, max_tokens):
            return _raw_one(llm, prompt, image, max_tokens)

        def chat(image, max_tokens, svc=service):
            return _service_one(svc, model, image, max_tokens)

        warm = warm or Load(streams=4, per_stream=2, max_tokens=loads[0].max_tokens)
        await _run_load("raw", model, warm, raw)
        await _run_load("service", model, warm, chat)
        results = []
        for load in loads:
            for path, one in (("raw", raw), ("service", chat)):
                result = await _run_load(path, model, load, one)
                log(f"  {model} {path:8} {load.streams} streams: {result.tokens_per_s:7.0f} tokens/s, "
                    f"TTFT p50 {result.summary()['ttft_p50_s'] * 1000:.0f} ms")
                results.append(result)
        with_insp, without = [], []
        shared = picture(0)
        pair = ((service, with_insp), (bare, without))
        for i in range(inspector_pairs):
            for svc, into in (pair if i % 2 == 0 else pair[::-1]):  # ABBA: neither goes first every time
                ttft, _ = await _service_one(svc, model, shared, 4)
                into.append(ttft)
        # The inspection alone (the pure functions over the rendered ids), timed directly.
        asked = _request(model, shared, 4)
        one = await service._render(resolve(spec), engine, asked)
        t1 = time.perf_counter()
        for _ in range(50):
            service._inspect(engine, one, asked)
        inspect_s = (time.perf_counter() - t1) / 50
        inspector = {"model": model, "pairs": inspector_pairs, "ttft_with_s": with_insp, "ttft_without_s": without,
                     "inspect_s": inspect_s, "renderer_inspect_s": renderer_inspect_s,
                     "engine_inspect_s": engine_inspect_s}
        talks = {"model": model, **await conversations(service, engine, model, conversation_runs)}
        if distinct is not None:
            for path, one in (("raw", raw), ("service", chat)):
                result = await _run_load(f"{path}-distinct", model, distinct, one, distinct=True)
                log(f"  {model} {path} distinct pictures, {distinct.streams} streams: "
                    f"{result.tokens_per_s:7.0f} tokens/s")
                results.append(result)
        return results, inspector, talks
    finally:
        engines.shutdown_all()
