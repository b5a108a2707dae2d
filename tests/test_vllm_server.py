"""The inspector against a real peer: vLLM's own OpenAI server, started for each tiny model with the
flags the app's engine gets, must tokenize the same conversation (images, slider kwargs) into exactly
the ids the inspector shows; and the app in front of that server (an endpoint entry) must show the same
inspection and give the same seeded answer as its local engine, for every family.

One server runs at a time (module-scoped, one per family) beside the session's one local engine, so
at most two engines are alive. Only 127.0.0.1 is contacted; the server runs offline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from vlm_demo.engine import EngineManager
from vlm_demo.engine.openai_request import prompt_body, request_body
from vlm_demo.registry import Sampling, load_registry
from vlm_demo.service import ChatRequest, ChatService, Turn, to_openai_messages
from vlm_demo.settings import Settings
from vlm_demo.profile import spec_for_endpoint

from .cases import CLIP, video_request
from .conftest import ARTIFACTS, ROOT, make_clip, make_image
from .vllm_server import (
    SCALE_OUT_FLAGS, Server, assert_same, beside_local_engine, collect, engine_kwargs, server_argv,
)

pytestmark = [pytest.mark.engine, pytest.mark.server]


@dataclass(frozen=True)
class Case:
    sizes: tuple[tuple[int, int], ...]
    """One image per size, all in the one user message."""
    mm_kwargs: dict[str, int]
    """Per-request slider values (merged over the model's defaults, as the app does)."""
    text: str = "What is in this picture?"
    clips: tuple[float, ...] = ()
    """One clip of each length (seconds at 48 kHz, stereo: a microphone's), after the pictures."""

    @property
    def modality(self) -> str:
        """The modality whose counts the case checks."""
        return "audio" if self.clips and not self.sizes else "image"

    def media(self) -> dict[str, tuple]:
        """The message's attachments, by modality."""
        found: dict[str, tuple] = {}
        if self.sizes:
            found["image"] = tuple(make_image(w, h, seed=i) for i, (w, h) in enumerate(self.sizes))
        if self.clips:
            found["audio"] = tuple(make_clip(s, name=f"clip-{i + 1}.wav") for i, s in enumerate(self.clips))
        return found


ONE_IMAGE = Case(((640, 480),), {})
TWO_IMAGES = Case(((640, 480), (300, 900)), {}, "Compare the two pictures.")
ONE_CLIP = Case((), {}, "What is said?", clips=(3.0,))
TWO_CLIPS = Case((), {}, "What differs between the two clips?", clips=(5.0, 45.0))
"""(the second past Qwen2-Audio's 30-s cap: what the cap leaves is the same on both sides)"""
VARIANTS: dict[str, Case] = {
    # a slider moved, where the family has one that changes the count at 640x480
    "tiny-qwen2.5-vl": Case(((640, 480),), {"max_pixels": 200704}),
    # (not InternVL2.5: an unpatched vLLM 0.32 server fails any per-request min/max_dynamic_patch for a
    # tokenizer with <|video_pad|>, as the real one has; see engine/workarounds.py and the test below)
    # At 640x480 a 2x2 grid is best for max_partition 4 and 9 alike; at 1280x960, 9 gives 3x3.
    "tiny-ovis2": Case(((1280, 960),), {"max_partition": 4}),
    # (not two images: vLLM 0.32's own ranges of two adjacent Gemma 3 images overlap by one merged "\n\n\n\n"
    # token, and the server's render endpoint refuses them as "not globally non-overlapping")
    "tiny-gemma3": Case(((640, 480),), {"do_pan_and_scan": True}),
}
HEAVY = {"deepseek_ocr", "deepseek_ocr2"}
"""Families whose tiny model is not small: vLLM 0.32 builds DeepSeek-OCR's SAM-B and CLIP-L encoders at full size
whatever the config says (``deepencoder.build_sam_vit_b``: "TODO: use vision_config"), 27-55 s to start and 20-60 s
a page on 2 cores. Their renders are held against vLLM's renderer without a server (tests/test_families.py,
tests/test_deepseek_ocr.py)."""
HELD_ELSEWHERE = {"qwen2_5_omni", "gemma4"}
"""Families whose server adds little here and about a minute to the suite each: the Omni thinker's pictures are
Qwen2.5-VL's and Gemma 4's clips go the way Qwen2-Audio's do (held against this server: ids, audit, the endpoint entry,
Export); their own renders are held against vLLM's renderer and transformers' processor (tests/test_omni.py,
tests/test_gemma4.py)."""
_TINY = [spec for spec in load_registry(ROOT / "models.yaml").models
         if spec.tiny and spec.family not in HEAVY | HELD_ELSEWHERE]
"""The tiny entries; one server per tiny model (an entry reusing an earlier one's, as tiny-qwen3-vl-thinking
reuses tiny-qwen3-vl's, adds none)."""
CASES: dict[str, dict[str, Case]] = {
    # model -> {"default": one image, default controls; "variant": a control moved, else two images}
    spec.name: {"default": ONE_IMAGE, "variant": VARIANTS.get(spec.name, TWO_IMAGES)}
    if spec.engine_args.limit_mm_per_prompt.get("image", 0) else {"default": ONE_CLIP, "variant": TWO_CLIPS}
    for spec in _TINY if spec is next(m for m in _TINY if m.family == spec.family)
}


# Parametrized here, not with pytest.param((model, case), indirect=...): pytest 9 sets a module-scoped
# fixture up again for every such param set, even with an equal value.
@pytest.fixture(scope="module", params=list(CASES))
async def server(request, registry, engines: EngineManager, settings: Settings, kept_server):
    """vLLM's OpenAI server for the model named by the parameter, with the app's engine of that model.

    The server starts at once; meanwhile the app's other engines stop, then its engine for this
    model starts (two engines alive at most, start-ups overlapping)."""
    spec = registry.get(request.param)
    async with beside_local_engine(spec, engines, settings, ARTIFACTS / f"vllm-server-{spec.name}.log",
                                   SCALE_OUT_FLAGS, kept=kept_server) as srv:
        yield srv


@pytest.mark.parametrize("model", list(CASES))
def test_server_flags_give_the_apps_engine_args(model, registry, settings):
    """The command line parses (with vLLM's own parser) into the engine arguments the app uses."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec = registry.get(model)
    argv = server_argv(spec, "/models/x", settings, 8000)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    parsed = AsyncEngineArgs.from_cli_args(args)
    assert args.trust_request_mm_kwargs
    assert parsed.served_model_name == [spec.name]
    for key, value in engine_kwargs(spec, settings).items():
        assert getattr(parsed, key) == value, key


@pytest.mark.parametrize("kind", ["default", "variant"])
async def test_inspector_ids_equal_the_servers(server: Server, kind: str, service: ChatService):
    spec = server.spec
    case = CASES[spec.name][kind]
    media = case.media()
    request = ChatRequest(model=spec.name, turns=(Turn("user", case.text, media),), mm_kwargs=case.mm_kwargs)
    inspection = await service.inspect(request)

    mm_kwargs = {**spec.default_mm_kwargs(), **request.mm_kwargs}
    body = {**prompt_body(spec.name, to_openai_messages(request), mm_kwargs), "add_generation_prompt": True}
    served = await tokenize(server, body)

    ours = list(inspection.prompt_token_ids)
    theirs = served["tokens"]
    modality = case.modality
    assert len(inspection.items[modality]) == len(media[modality])
    image_id = inspection.items[modality][0].token_id
    counts = [im.count for im in inspection.items[modality]]
    assert all(counts), counts
    assert theirs.count(image_id) == sum(counts) == ours.count(image_id)
    if ours != theirs:
        pairs = enumerate(zip(ours, theirs, strict=False))
        first = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
        pytest.fail(f"{spec.name}: inspector has {len(ours)} ids, server {len(theirs)}; first difference at "
                    f"{first}: ours {ours[first:first + 8]}, server's {theirs[first:first + 8]}")
    assert served["count"] == len(ours)
    assert served["max_model_len"] == inspection.budget.max_model_len
    if case.mm_kwargs:  # the moved slider took effect on the server too (not ignored on both sides)
        at_default = await tokenize(server, {**body, "mm_processor_kwargs": spec.default_mm_kwargs()})
        assert at_default["tokens"].count(image_id) != sum(counts)


AUDITORS: dict[str, Any] = {}
"""Each server's auditor (``service.audit.Auditor``)."""


@pytest.mark.parametrize("kind", ["default", "variant"])
async def test_the_audit_finds_the_plain_server_equal(server: Server, kind: str, registry, engines, settings):
    """``audit`` (issue 25): the server's render of the app's request (its render endpoint) equals vLLM's
    reference render from the checkpoint the server names (its /v1/models root, a directory here). The request
    goes with the entry's default settings, as the page sends it: these servers start with each setting at its
    largest server-wide (the app's flags, sizing the encoder cache), which a request without settings would get
    (Gemma 3's pan-and-scan: rightly a difference then)."""
    from vlm_demo.engine.server_prompt import RENDER
    from vlm_demo.inspector.verdict import EQUAL
    from vlm_demo.service.audit import Auditor

    spec = server.spec
    remote = dataclasses.replace(spec_for_endpoint(registry, server.url, spec.name), name=f"remote-{spec.name}")
    case = CASES[spec.name][kind]
    request = ChatRequest(model=remote.name, turns=(Turn("user", case.text, case.media()),),
                          mm_kwargs=case.mm_kwargs)
    auditor = AUDITORS.get(server.url) or Auditor.of(registry.with_model(remote), remote.name, engines, settings)
    AUDITORS[server.url] = auditor  # (its reference renderer built once per server)
    verdict = await auditor.audit(request, with_defaults=True)
    assert verdict.status == EQUAL and verdict.how == RENDER, verdict.text()
    assert [i.reference for i in verdict.items] == [i.server for i in verdict.items] and all(verdict.items)


@pytest.mark.parametrize("kind", ["default", "variant"])
async def test_an_endpoint_entry_matches_the_local_engine(server: Server, kind: str, registry, engines, settings):
    """The app's remote engine in front of this server: the same inspection as the local engine (ids,
    ranges, geometry, prompt, content format) and the same seeded answer, token for token."""
    spec = server.spec
    remote = dataclasses.replace(spec_for_endpoint(registry, server.url, spec.name), name=f"remote-{spec.name}")
    both = ChatService(registry.with_model(remote), engines, settings)
    case = CASES[spec.name][kind]
    media = case.media()
    # Every token on both sides: the server does not restrict a random-weight model to printable tokens.
    sampling = Sampling(temperature=0.8, top_p=0.95, max_tokens=8, seed=7, ignore_eos=True, printable_only=False)

    def request(model: str) -> ChatRequest:
        return ChatRequest(model=model, turns=(Turn("user", case.text, media),), mm_kwargs=case.mm_kwargs,
                           sampling=sampling)
    assert_same(await both.inspect(request(remote.name)), await both.inspect(request(spec.name)))
    rendered_r, answer_r = await collect(both, request(remote.name))
    rendered_l, answer_l = await collect(both, request(spec.name))
    assert rendered_r.rendered.prompt_token_ids == rendered_l.rendered.prompt_token_ids
    assert (answer_r.answer, answer_r.figures.tokens, answer_r.figures.finish_reason) == \
        (answer_l.answer, answer_l.figures.tokens, answer_l.figures.finish_reason)
    assert answer_l.figures.tokens == 8 and answer_l.figures.finish_reason == "length"  # 8 tokens, locally and remotely


async def test_an_auto_endpoint_entry_gets_its_checkpoints_family(server: Server, registry, engines, settings):
    """An endpoint entry with ``family: auto``: what the server says it serves (``/v1/models`` ``root``, here the
    tiny model's directory) gives the checkpoint's model_type, so the entry has its family's adapter (markers,
    geometry, Detect) as a named entry has, in the service and the engine alike (read from its entry alone, with no
    server asked, an auto entry is generic)."""
    from vlm_demo.families import GENERIC
    from vlm_demo.profile import resolve

    spec = server.spec
    named = dataclasses.replace(spec_for_endpoint(registry, server.url, spec.name), name=f"remote-{spec.name}")
    auto = dataclasses.replace(named, name=f"auto-{spec.name}", family="auto")
    both = ChatService(registry.with_model(named).with_model(auto), engines, settings)

    case = CASES[spec.name]["default"]

    def request(model: str) -> ChatRequest:
        return ChatRequest(model=model, turns=(Turn("user", "Hi", case.media()),))
    a, b = await both.inspect(request(named.name)), await both.inspect(request(auto.name))
    assert a.family == b.family == spec.family
    assert both.profile(auto.name).adapter is both.profile(named.name).adapter  # (the service's: the server asked)
    assert resolve(auto).adapter is GENERIC
    assert a.prompt_token_ids == b.prompt_token_ids and a.items[case.modality] == b.items[case.modality]


async def test_a_served_model_not_in_the_registry_gets_its_controls(server: Server, registry, engines, settings):
    """A served name the registry does not know, with no --family: the checkpoint the server names (``root``, a
    directory here) gives the family's controls, so ``max_pixels`` (refused before: "has no setting 'max_pixels';
    its settings: none") renders on the server as in the local engine; read as generic, the same checkpoint gets
    its processor's controls derived from its files (no engine here), and ``size.longest_edge`` renders the same
    ids. A name neither offers is one line."""
    if server.spec.name != "tiny-qwen2.5-vl":
        pytest.skip("Qwen2.5-VL only")
    from vlm_demo.errors import InputError

    spec = server.spec
    unknown = dataclasses.replace(spec_for_endpoint(registry, server.url, spec.name), name="unknown-qwen",
                                  family="auto", controls=())
    generic = dataclasses.replace(unknown, name="generic-qwen", family="generic")
    service = ChatService(registry.with_model(unknown).with_model(generic), engines, settings)
    assert [c.kwarg for c in (await service.controls(unknown.name)).controls][:2] == ["min_pixels", "max_pixels"]
    derived = await service.controls(generic.name)
    assert {"size.longest_edge", "size.shortest_edge"} <= {c.kwarg for c in derived.controls}

    def request(model: str, kwargs) -> ChatRequest:
        return ChatRequest(model=model, turns=(Turn("user", "Hi", {"image": (make_image(1280, 720),)}),),
                           mm_kwargs=kwargs)
    local = await service.inspect(request(spec.name, {"max_pixels": 200704}), start_engine=False)
    by_family = await service.inspect(request(unknown.name, {"max_pixels": 200704}))
    by_processor = await service.inspect(request(generic.name, {"size.longest_edge": 200704}))
    assert by_family.prompt_token_ids == by_processor.prompt_token_ids == local.prompt_token_ids
    assert local.items["image"][0].count == 252  # smart_resize(720, 1280) at max_pixels 200704: 336x588, 12x21 cells
    with pytest.raises(InputError, match="has no setting 'max_patches'"):
        await service.inspect(request(unknown.name, {"max_patches": 3}))


async def test_internvl_kwargs_per_request_fail_on_an_unpatched_server(server: Server, registry, engines, settings):
    """vLLM 0.32's own server hands InternVL2.5's image kwargs to its video processor: the app says what the
    server answered in one line (the app's in-process engine has the workaround, and renders the same)."""
    if server.spec.name != "tiny-internvl2.5":
        pytest.skip("InternVL2.5 only")
    from vlm_demo.errors import RemoteError

    remote = dataclasses.replace(spec_for_endpoint(registry, server.url, server.spec.name), name="remote-internvl")
    both = ChatService(registry.with_model(remote), engines, settings)
    request = ChatRequest(model=remote.name, turns=(Turn("user", "Hi", {"image": (make_image(640, 480),)}),),
                          mm_kwargs={"max_dynamic_patch": 6})
    with pytest.raises(RemoteError, match="answered 400.*max_dynamic_patch"):
        await both.inspect(request)
    local = await both.inspect(dataclasses.replace(request, model=server.spec.name))
    assert local.items["image"][0].count == 7 * 256


async def tokenize(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=120.0) as client:
        response = await client.post("/tokenize", json=body)
    assert response.status_code == 200, f"{response.status_code}: {response.text}\n{server.log_tail()}"
    return response.json()


async def test_a_video_through_the_server(server: Server, registry, engines, settings):
    """The project's clip, 4 frames, through vLLM's server (an endpoint entry: its render endpoint, with the
    request's ``media_io_kwargs``) and through the local engine: the same ids, video ranges and counts."""
    from vlm_demo.intake import load_video

    spec = server.spec
    if not spec.engine_args.limit_mm_per_prompt.get("video"):
        pytest.skip(f"{spec.name} takes no video")
    remote = dataclasses.replace(spec_for_endpoint(registry, server.url, spec.name, spec.family),
                                 name=f"remote-{spec.name}")
    both = ChatService(registry.with_model(remote), engines, settings)
    clip = load_video(CLIP, settings)
    local = await both.inspect(video_request(spec.name, clip, 4))
    far = await both.inspect(video_request(remote.name, clip, 4))
    assert far.prompt_token_ids == local.prompt_token_ids
    (ours,), (theirs,) = local.items["video"], far.items["video"]
    assert (theirs.offset, theirs.length, theirs.count) == (ours.offset, ours.length, ours.count) and ours.count > 0
    assert ours.num_frames == 4 and theirs.num_frames is None  # the server samples; it does not say which frames


async def test_the_server_streams_while_it_generates(server: Server):
    """The server's answers reach a client in this session as they are generated, not in one burst at the
    end. Started in a session of its own (``start_new_session``), the engine core's busy wait starved this
    process of its core: in 4 of 6 server starts each answer arrived whole after it was done. Six answers of
    128 tokens each; in every one the events must span at least half of the time the answer took."""
    import time

    body = request_body(prompt_body(server.spec.name, [{"role": "user", "content": "Count to a thousand."}]),
                        Sampling(max_tokens=128, ignore_eos=True))
    spans = []
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=120.0) as client:
        for _ in range(6):
            t0, times = time.perf_counter(), []
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200, server.log_tail()
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        times.append(time.perf_counter() - t0)
            assert len(times) > 64, times
            spans.append((times[-1] - times[0]) / times[-1])
    assert min(spans) > 0.5, f"{server.spec.name}: events spanned {spans} of each answer's time"


async def test_a_clips_export_replays_against_the_server(server: Server, service: ChatService):
    """Export of a question with two clips (one past the model's cap): the body ``vllm serve`` takes (each clip an
    ``audio_url`` WAV, read with libsndfile), posted to the real server: it answers, and counts the prompt's tokens
    as the panels do."""
    from vlm_demo.export import chat_completions_body

    spec = server.spec
    if not spec.engine_args.limit_mm_per_prompt.get("audio"):
        pytest.skip(f"{spec.name} takes no clips")
    request = ChatRequest(model=spec.name, turns=(Turn("user", TWO_CLIPS.text, TWO_CLIPS.media()),),
                          sampling=Sampling(max_tokens=4, seed=1))
    body = chat_completions_body(request, spec, stream=False)
    assert [p["type"] for p in body["messages"][-1]["content"]] == ["audio_url", "audio_url", "text"]
    assert body["media_io_kwargs"] == {"audio": {"audio_backend": "soundfile"}}
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=120.0) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text[:500]
    inspection = await service.inspect(request)
    assert response.json()["usage"]["prompt_tokens"] == inspection.budget.total
    from vlm_demo import families

    long = next(k.count for k in families.get(spec.family).known_counts["audio"] if k.size == 45.0)
    assert [e.count for e in inspection.items["audio"]] == [125, long]  # (Qwen2-Audio: 750, its 30-s cap)
