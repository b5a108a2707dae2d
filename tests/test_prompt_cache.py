"""Prompt cache per answer (vLLM's prefix cache, ``Done.figures.cached_tokens``) and tiny models that answer in
printable text (``allowed_token_ids``), against the real engine of the tiny Qwen2.5-VL."""

from __future__ import annotations

import statistics
import time

import pytest

from vlm_demo.engine.renderer import printable_only
from vlm_demo.export import PRINTABLE_NOTE, chat_completions_body, curl_command, python_snippet, serve_command
from vlm_demo.profile import resolve
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, Done, Failed, Rendered, Turn

from .conftest import make_image

pytestmark = [pytest.mark.engine]


MODEL = "tiny-qwen2.5-vl"
SAMPLING = Sampling(temperature=0.8, top_p=0.95, max_tokens=16, seed=7)


async def chat(service, turns: tuple[Turn, ...], sampling: Sampling = SAMPLING) -> tuple[Rendered, Done]:
    events = [e async for e in service.chat(ChatRequest(model=MODEL, turns=turns, sampling=sampling))]
    assert not any(isinstance(e, Failed) for e in events), events
    return next(e for e in events if isinstance(e, Rendered)), next(e for e in events if isinstance(e, Done))


def reads_as_text(text: str) -> bool:
    return "\ufffd" not in text and all(c.isprintable() or c in " \n" for c in text)


async def test_turn_two_reuses_turn_ones_prompt_from_the_prefix_cache(service, registry, report):
    engine = await service.engines.get(registry.get(MODEL))
    block = engine.prefix_cache_block
    assert block, "the engine runs without vLLM's prefix cache"
    # Images no other test sends (their hashes are part of the cache's block hashes).
    images = (make_image(392, 308, seed=11), make_image(336, 280, seed=12))
    turn1 = (Turn("user", "Compare these two pictures.", {"image": images}),)
    rendered1, done1 = await chat(service, turn1)
    turn2 = (*turn1, Turn("assistant", done1.answer), Turn("user", "Which one is brighter?"))
    rendered2, done2 = await chat(service, turn2)

    ids1, ids2 = rendered1.rendered.prompt_token_ids, rendered2.rendered.prompt_token_ids
    image_tokens = sum(r.length for r in rendered1.rendered.ranges["image"])
    common = next((i for i, (a, b) in enumerate(zip(ids1, ids2)) if a != b), min(len(ids1), len(ids2)))
    assert done1.figures.prompt_tokens == len(ids1) and done2.figures.prompt_tokens == len(ids2)
    assert common == len(ids1), "turn 2's prompt does not start with turn 1's"
    assert done1.figures.cached_tokens < block  # fresh images: at most the text before them
    # Turn 1's whole blocks (its images included) come from the cache; nothing beyond what both share.
    assert len(ids1) // block * block <= done2.figures.cached_tokens <= common
    assert done2.figures.cached_tokens >= image_tokens - block
    report(f"prefix cache (tiny Qwen2.5-VL, 2 images = {image_tokens} image tokens, block {block}): turn 1 "
           f"{done1.figures.cached_tokens}/{done1.figures.prompt_tokens} cached, turn 2 {done2.figures.cached_tokens}/{done2.figures.prompt_tokens} "
           f"cached; ttft {done1.figures.ttft_s:.3f} s -> {done2.figures.ttft_s:.3f} s")


def spy_on_generate(monkeypatch, engine) -> list[list[bool]]:
    """Record, for each request the engine core gets, which of its pictures go with their tensors."""
    sent: list[list[bool]] = []
    generate = engine._llm.generate

    def spy(engine_input, *args, **kwargs):
        sent.append([item is not None for item in engine_input.get("mm_kwargs", {}).get("image", ())])
        return generate(engine_input, *args, **kwargs)
    monkeypatch.setattr(engine._llm, "generate", spy)
    return sent


async def test_earlier_pictures_go_to_the_engine_core_as_hashes(service, registry, monkeypatch):
    """Each turn re-sends every earlier picture; as for a ``vllm serve`` client, the engine core gets the
    tensors once and then only the hash (vLLM's processor cache, mirrored on both sides), while the render
    the panels show keeps every picture's tensors."""
    engine = await service.engines.get(registry.get(MODEL))
    sent = spy_on_generate(monkeypatch, engine)
    images = (make_image(364, 252, seed=21), make_image(252, 364, seed=22))
    turn1 = (Turn("user", "Compare these two pictures.", {"image": images}),)
    _, done1 = await chat(service, turn1)
    rendered2, done2 = await chat(service, (*turn1, Turn("assistant", done1.answer), Turn("user", "And now?")))
    assert sent == [[True, True], [False, False]]
    assert done2.figures.tokens > 0 and done2.figures.finish_reason in ("length", "stop")
    assert all(item is not None for item in rendered2.rendered.engine_input["mm_kwargs"]["image"])
    assert [g.processed_size for g in rendered2.rendered.geometry["image"]] == [(364, 252), (252, 364)]


async def test_drift_between_the_processor_caches_heals_by_resending(service, registry, monkeypatch):
    """A picture the sender side of vLLM's processor cache counts as sent, but the engine core never got
    (a request that ended before it reached the core): the core answers "cache miss", vLLM drops the hash,
    and the request goes again with the tensors; the user sees an answer, not an error."""
    engine = await service.engines.get(registry.get(MODEL))
    turns = (Turn("user", "What is this?", {"image": (make_image(308, 224, seed=23),)}),)
    rendered, _ = await chat(service, turns, Sampling(temperature=0.0, max_tokens=1))
    engine._forget(engine._for_engine_core(rendered.rendered.engine_input)[1])  # the core has it: not a drift
    lost = make_image(224, 308, seed=24)
    lost_turns = (Turn("user", "What is this?", {"image": (lost,)}),)
    lost_render = await service._render(resolve(registry.get(MODEL)), engine,
                                        ChatRequest(model=MODEL, turns=lost_turns))
    engine._for_engine_core(lost_render.engine_input)  # counted as sent; never sent
    sent = spy_on_generate(monkeypatch, engine)
    _, done = await chat(service, lost_turns)
    assert sent == [[False], [True]], sent
    assert done.figures.tokens == SAMPLING.max_tokens or done.figures.finish_reason == "stop"


async def test_random_weight_answer_reads_as_text(service, registry):
    spec = registry.get(MODEL)
    assert spec.random_weights and printable_only(spec)
    _, done = await chat(service, (Turn("user", "Say something.", {"image": (make_image(280, 224, seed=13),)}),),
                         Sampling(temperature=1.0, top_p=1.0, max_tokens=64, seed=3, ignore_eos=True))
    assert done.figures.tokens == 64 and done.figures.finish_reason == "length"
    assert done.answer.strip() and reads_as_text(done.answer), repr(done.answer)


async def test_printable_set_holds_text_tokens_and_eos_only(service, registry):
    engine = await service.engines.get(registry.get(MODEL))
    tok = engine.tokenizer
    allowed = set(engine.printable_token_ids)
    for special in ("<|vision_pad|>", "<|image_pad|>", "<|vision_start|>", "<|im_start|>", "<|fim_pad|>"):
        assert tok.convert_tokens_to_ids(special) not in allowed, special
    assert tok.eos_token_id in allowed
    assert tok.convert_tokens_to_ids("<|im_end|>") in allowed
    assert set(tok.encode("Hello, world!\n", add_special_tokens=False)) <= allowed
    assert tok.encode("é", add_special_tokens=False)[0] not in allowed  # one byte of a UTF-8 pair: U+FFFD alone
    assert all(reads_as_text(tok.decode([i])) for i in allowed - {tok.eos_token_id})


async def test_cost_of_allowed_token_ids(service, registry, report):
    """The restriction is one boolean mask row per request in vLLM's input batch (set when the request is
    added) and a ``masked_fill_`` of the logits each step: time 64-token answers with and without it."""
    engine = await service.engines.get(registry.get(MODEL))
    turns = (Turn("user", "Count to ten."),)

    async def answer(printable: bool) -> tuple[float, Done]:
        sampling = Sampling(temperature=1.0, top_p=1.0, max_tokens=64, seed=5, ignore_eos=True,
                            printable_only=printable)
        t0 = time.perf_counter()
        _, done = await chat(service, turns, sampling)
        return time.perf_counter() - t0, done

    times: dict[bool, list[float]] = {True: [], False: []}
    answers: dict[bool, str] = {}
    for _ in range(3):
        for printable in (False, True):
            seconds, done = await answer(printable)
            times[printable].append(seconds)
            answers[printable] = done.answer
    assert reads_as_text(answers[True])
    assert not reads_as_text(answers[False])  # the restriction is what keeps the noise readable
    on, off = statistics.median(times[True]), statistics.median(times[False])
    report(f"allowed_token_ids ({len(engine.printable_token_ids)} of {len(engine.tokenizer)} ids), tiny "
           f"Qwen2.5-VL, 64-token answers: {on * 1000:.0f} ms with, {off * 1000:.0f} ms without (median of 3)")


@pytest.mark.parametrize("name, printable", [(MODEL, True), ("qwen2.5-vl-3b", False)])
def test_export_says_when_answers_were_restricted(registry, name: str, printable: bool):
    spec = registry.get(name)
    request = ChatRequest(model=name, turns=(Turn("user", "Hi"),))
    snippets = (curl_command(spec), python_snippet(chat_completions_body(request, spec), spec))
    assert all(s.startswith(PRINTABLE_NOTE + "\n") == printable for s in snippets)
    assert "--enable-prefix-caching" in serve_command(spec)
