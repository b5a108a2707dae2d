"""The real vLLM engine on CPU with the four tiny models: streaming, image-token counts,
singletons, aborts and model switches."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path

import psutil
import pytest

from vlm_demo.engine.processes import cpu_preload
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, Delta, Done, Failed, Rendered, Turn

from .conftest import command_line, make_image
from .oracles import internvl_tiles, ovis_tokens, qwen_tokens

pytestmark = [pytest.mark.engine]


FIXED = Sampling(temperature=0.0, top_p=1.0, max_tokens=8, ignore_eos=True)


def image_token_count(rendered, engine) -> int:
    image_id = engine.tokenizer.convert_tokens_to_ids(engine.adapter.feature_tokens["image"])
    return sum(1 for t in rendered.prompt_token_ids if t == image_id)


async def ask(service, model: str, image, text="What is in this picture?", **mm_kwargs):
    request = ChatRequest(model=model, turns=(Turn("user", text, {"image": (image,)}),), mm_kwargs=mm_kwargs,
                          sampling=FIXED)
    events = [e async for e in service.chat(request)]
    assert not any(isinstance(e, Failed) for e in events), events
    rendered = next(e for e in events if isinstance(e, Rendered)).rendered
    done = events[-1]
    assert isinstance(done, Done), done
    return rendered, done


EXPECTED = {
    # model name -> (image size, mm kwargs, expected image tokens)
    "tiny-llava-1.5": [((640, 480), {}, 576), ((200, 900), {}, 576)],
    "tiny-qwen2.5-vl": [
        ((640, 480), {}, qwen_tokens(640, 480, 3136, 401408)),
        ((1600, 400), {}, qwen_tokens(1600, 400, 3136, 401408)),
        ((1600, 400), {"max_pixels": 100352}, qwen_tokens(1600, 400, 3136, 100352)),
    ],
    "tiny-internvl2.5": [
        ((640, 480), {}, 256 * internvl_tiles(640, 480)),
        ((448, 448), {}, 256 * internvl_tiles(448, 448)),
        ((1600, 400), {"max_dynamic_patch": 4}, 256 * internvl_tiles(1600, 400, max_num=4)),
    ],
    # Ovis2's covering rule picks the fewest partitions covering > 90% of the image: 2x2 for 640x480.
    "tiny-ovis2": [
        ((640, 480), {}, ovis_tokens(4)),
        ((448, 448), {}, ovis_tokens(1)),
        ((640, 480), {"max_partition": 1}, ovis_tokens(1)),
    ],
}


async def check_expansion(service, engines, model):
    for (w, h), kwargs, expected in EXPECTED[model]:
        rendered, done = await ask(service, model, make_image(w, h), **kwargs)
        engine = await engines.get(service.registry.get(model))
        assert image_token_count(rendered, engine) == expected, (model, (w, h), kwargs)
        assert len(rendered.ranges["image"]) == 1
        assert done.figures.tokens >= 8 and done.answer
        assert done.figures.ttft_s > 0
        assert engine.running_requests() == 0


async def test_qwen_numbers_match_the_real_checkpoint():
    # Qwen2.5-VL-3B at 640x480 gives 17 x 23 = 391 image tokens (the 28-px grid of 476 x 644).
    assert qwen_tokens(640, 480, 3136, 12845056) == 391
    # InternVL2.5 at 640x480 (4:3) with max_dynamic_patch 12: a 4x3 grid plus the thumbnail.
    assert internvl_tiles(640, 480) == 13


async def test_two_first_requests_start_one_engine(registry, engines):
    spec = registry.get("tiny-llava-1.5")
    await engines.shutdown(spec.name)
    before = engines.starts
    first, second = await asyncio.gather(engines.get(spec), engines.get(spec))
    assert first is second
    assert engines.starts == before + 1
    assert engines.state(spec.name) == "ready"


async def test_a_cpu_engine_runs_with_tcmalloc_and_the_app_does_not_keep_it(registry, engines):
    """vLLM's CPU tip: the engine's processes start with tcmalloc preloaded (the set-up installs Debian's
    libtcmalloc-minimal4); the app's own environment is as before, so a browser or server it starts later
    does not inherit the preload."""
    engine = await engines.get(registry.get("tiny-llava-1.5"))
    maps = [Path(f"/proc/{pid}/maps").read_text() for pid in engine.child_pids if Path(f"/proc/{pid}/maps").exists()]
    assert maps and all("libtcmalloc" in m for m in maps), "an engine process runs without tcmalloc"
    # the library is there, and this process's environment holds no preload of it (cpu_preload() is empty
    # without the library or with tcmalloc already in LD_PRELOAD)
    assert "tcmalloc" in cpu_preload().get("LD_PRELOAD", ""), "libtcmalloc-minimal4 missing, or the app kept it"


async def test_llava_576_tokens_for_any_size(service, engines):
    await check_expansion(service, engines, "tiny-llava-1.5")


async def test_stopping_the_consumer_aborts_the_request(service, engines):
    spec = service.registry.get("tiny-llava-1.5")
    request = ChatRequest(model=spec.name, turns=(Turn("user", "Describe it.", {"image": (make_image(300, 300),)}),),
                          sampling=Sampling(max_tokens=2000, ignore_eos=True))
    engine = await engines.get(spec)
    seen = 0
    async with contextlib.aclosing(service.chat(request)) as events:
        async for event in events:
            if isinstance(event, Delta):
                seen += 1
                if seen == 3:
                    assert engine.running_requests() == 1
                    break
    assert seen == 3, f"the answer ended after {seen} updates: nothing was left to abort"
    for _ in range(50):
        if engine.running_requests() == 0:
            break
        await asyncio.sleep(0.1)
    assert engine.running_requests() == 0


async def test_a_prefill_that_lasts_says_what_the_engine_encodes(service, engines, monkeypatch):
    """Issue 44: between the engine getting a question and its first token (a reader's many views on CPU took 28 s)
    the stream says so each ``WAITING_EVERY_S`` (here every 10 ms, so the tiny model's prefill of a large picture
    lasts long enough): ``Prefilling`` events with what the engine encodes and the seconds so far, before any text."""
    from vlm_demo.service import Prefilling
    from vlm_demo.service import chat as chat_module

    monkeypatch.setattr(chat_module, "WAITING_EVERY_S", 0.01)
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(Turn("user", "Read it.", {"image": (
        make_image(1400, 1000, seed=3),)}),), sampling=FIXED, mm_kwargs={"max_pixels": 1003520})
    events = [e async for e in service.chat(request)]
    assert isinstance(events[-1], Done), events[-1]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, Delta))
    prefill = [e for e in events[:first_text] if isinstance(e, Prefilling)]
    assert prefill and not any(isinstance(e, Prefilling) for e in events[first_text:]), events
    rendered = next(e for e in events if isinstance(e, Rendered))
    tokens = rendered.inspection.items["image"][0].count
    assert prefill[-1].what == f"1 picture, {tokens:,} vision tokens, in a {rendered.inspection.budget.total:,}-token prompt"
    assert [e.seconds for e in prefill] == sorted(e.seconds for e in prefill) and prefill[0].model == "tiny-qwen2.5-vl"


async def test_switching_models_ends_the_previous_engine(service, engines, monkeypatch):
    """Where only one engine fits (``max_engines`` 1): a question to a model whose engine is starting, and a switch
    to another model meanwhile (the page's picker): the question ends (its answer, or one line saying its engine was
    stopped for the other model, where the switch came before the question reached it; it used to wait forever),
    and the first engine's processes end."""
    from vlm_demo.engine import Engine

    monkeypatch.setattr(engines, "settings", dataclasses.replace(engines.settings, max_engines=1))
    llava, qwen = service.registry.get("tiny-llava-1.5"), service.registry.get("tiny-qwen2.5-vl")
    await engines.shutdown(llava.name)  # the question starts it
    await engines.shutdown(qwen.name)  # (kept warm by an earlier test: the switch must start it)
    retired: list[frozenset[int]] = []
    retire = Engine.retire
    monkeypatch.setattr(Engine, "retire", lambda self: (retired.append(self.child_pids), retire(self)))
    request = ChatRequest(model=llava.name, turns=(Turn("user", "What is in this picture?",
                                                        {"image": (make_image(64, 48),)}),), sampling=FIXED)

    async def ask() -> list:
        return [event async for event in service.chat(request, preview=True)]

    asking = asyncio.ensure_future(ask())
    while engines.progress(llava.name) is None:  # its engine's start has begun
        await asyncio.sleep(0.01)
    switched = asyncio.ensure_future(engines.get(qwen))
    events = await asyncio.wait_for(asking, 120)
    await switched
    last = events[-1]
    assert isinstance(last, Done) or (isinstance(last, Failed) and "another model" in last.message), last
    assert engines.loaded() == [qwen.name]
    pids = [pid for found in retired for pid in found]
    assert pids

    def gone() -> list[int]:
        return [p for p in pids if not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE]
    deadline = time.monotonic() + 30  # the stopped engine ends in the background (the new one starts meanwhile)
    while gone() != pids and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert gone() == pids


async def test_qwen_one_token_per_28px(service, engines):
    await check_expansion(service, engines, "tiny-qwen2.5-vl")


async def test_render_equals_the_openai_server_path(service, engines):
    """Engine.render gives the token ids vLLM's OpenAI server renders for the same request."""
    from vlm_demo.engine import chat_params

    spec = service.registry.get("tiny-qwen2.5-vl")
    engine = await engines.get(spec)
    messages = [{"role": "user", "content": [{"type": "image_pil", "image_pil": make_image(900, 300)},
                                             {"type": "text", "text": "Compare."}]}]
    kwargs = {"max_pixels": 200704, "min_pixels": 3136}
    ours = await engine.render(messages, kwargs)
    renderer = engine._llm.renderer
    _, (served,) = await renderer.render_chat_async([messages], chat_params(kwargs),
                                                    prompt_extras={"mm_processor_kwargs": kwargs})
    assert list(ours.prompt_token_ids) == list(served["prompt_token_ids"])
    assert ours.ranges["image"][0].length == served["mm_placeholders"]["image"][0].length


async def test_internvl_256_tokens_per_tile(service, engines):
    await check_expansion(service, engines, "tiny-internvl2.5")


async def test_ovis_partitions(service, engines):
    await check_expansion(service, engines, "tiny-ovis2")


@pytest.mark.parametrize("problem", ["no such directory", "not a model", "broken config", "not enough memory",
                                     "weights vLLM cannot load"])
async def test_an_engine_that_cannot_start_names_the_cause(problem, settings, registry, tmp_path):
    import json

    from vlm_demo.engine import EngineManager
    from vlm_demo.errors import EngineStartError
    from vlm_demo.registry import ModelSpec

    spec = registry.get("tiny-llava-1.5")
    expected = {"no such directory": "is not a model directory", "not a model": "is not a model directory",
                "broken config": "could not start broken .*no_such_architecture",
                "not enough memory": "cannot start here: does not fit memory: needs about 100000.8 GiB",
                # the engine process's own error, not "Engine core initialization failed. See root cause above"
                "weights vLLM cannot load": r"could not start broken .*Error: .*vision_tower"}
    if problem == "not enough memory":
        manager = EngineManager(dataclasses.replace(settings, cpu_kv_cache_gib=100_000.0))
    else:
        manager = EngineManager(settings)
        model_dir = tmp_path / "model"
        if problem != "no such directory":
            model_dir.mkdir()
        if problem == "broken config":
            (model_dir / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
        if problem == "weights vLLM cannot load":  # a LLaVA saved by transformers 5: names vLLM 0.32 does not map
            from transformers import AutoConfig, AutoProcessor, LlavaForConditionalGeneration

            from vlm_demo.tiny_models import tiny_model_dir

            tiny = tiny_model_dir("llava", settings.cache_dir / "tiny-models")
            LlavaForConditionalGeneration(AutoConfig.from_pretrained(tiny)).save_pretrained(model_dir)
            AutoProcessor.from_pretrained(tiny).save_pretrained(model_dir)
        spec = ModelSpec(name="broken", label="Broken", family="llava", path=str(model_dir))
    manager.warm()  # the engines' forkserver (not an engine's process) runs before the count
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(EngineStartError, match=expected[problem]) as caught:
        await manager.get(spec)
    assert "\n" not in str(caught.value)
    assert manager.loaded() == [] and manager.state(spec.name) == "not loaded"
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in left if (line := command_line(p)) and "resource_tracker" not in line]


async def test_engines_of_recent_models_stay_warm(service, engines):
    """Switching back to a model used a moment ago answers from its engine, still up (no start): engines stay while
    they fit the memory budget, each counted with the memory its processes took; the status every tab shows lists
    them, the one used last first."""
    llava, qwen = service.registry.get("tiny-llava-1.5"), service.registry.get("tiny-qwen2.5-vl")
    await engines.get(qwen)
    await engines.get(llava)
    before = engines.starts
    first = await engines.get(qwen)
    assert engines.starts == before and set(engines.loaded()) >= {llava.name, qwen.name}
    assert [name for name, _ in engines.states()][:2] == [qwen.name, llava.name]
    assert engines.current() == qwen.name
    assert 0.5 < first.footprint_gib < 4, first.footprint_gib  # the KV cache (1 GiB here) and two processes
    rendered, done = await ask(service, qwen.name, make_image(64, 48))
    assert done.figures.tokens >= 1 and engines.starts == before


async def test_a_start_the_person_walked_away_from_is_not_the_model_used_last(service, engines):
    """Picked, then another model picked back while its engine starts: the start ends, but a new tab opens on the
    model picked last, and that model's engine stays first in line to be kept (before, the start's end made its
    model the one used last)."""
    llava, qwen = service.registry.get("tiny-llava-1.5"), service.registry.get("tiny-qwen2.5-vl")
    await engines.get(qwen)
    await engines.shutdown(llava.name)
    engines.touch(llava.name)
    start = asyncio.ensure_future(engines.get(llava))
    while engines.progress(llava.name) is None:
        await asyncio.sleep(0.01)
    assert engines.current() == llava.name  # (its start counts while it is the model picked)
    engines.touch(qwen.name)
    assert engines.current() == qwen.name
    await start
    assert engines.current() == qwen.name
    assert [name for name, _ in engines.states()][:2] == [qwen.name, llava.name]


async def test_a_model_that_cannot_start_here_leaves_the_running_engines_alone(service, engines, settings):
    """A model this machine cannot start (a Hub checkpoint not in the cache, the Hub unreachable) is refused before
    anything stops: the engines that ran still run and answer."""
    from vlm_demo.errors import EngineStartError
    from vlm_demo.registry import ModelSpec

    qwen = service.registry.get("tiny-qwen2.5-vl")
    engine = await engines.get(qwen)
    far = ModelSpec(name="far", label="Far away", family="qwen2_5_vl", repo="nobody/not-cached-vl",
                    download_gb=7.5)
    with contextlib.ExitStack() as stack:
        stack.enter_context(pytest.MonkeyPatch.context()).setenv("HF_HUB_OFFLINE", "1")
        from huggingface_hub import constants
        stack.enter_context(pytest.MonkeyPatch.context()).setattr(constants, "HF_HUB_OFFLINE", True)
        from vlm_demo.engine import availability
        availability.forget_hub_answer()
        with pytest.raises(EngineStartError, match="needs a download of 7.5 GB and the Hugging Face Hub cannot be "
                                                   "reached"):
            await engines.get(far)
        availability.forget_hub_answer()
    assert engines.running(qwen) is engine and not engine.dead
    rendered, done = await ask(service, qwen.name, make_image(64, 48))
    assert done.figures.tokens >= 1
