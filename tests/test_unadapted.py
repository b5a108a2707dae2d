"""Families vLLM 0.32 serves that have no adapter here, each of its own processing shape, through the generic path:
LFM2-VL (hybrid convolution/attention language model; tiles with row/column marker tokens and a thumbnail),
Mistral 3 with the Pixtral processor (rows of ``[IMG]`` broken by ``[IMG_BREAK]``, ending in ``[IMG_END]``),
PaliGemma (no chat template: vLLM's fallback; the image tokens and a ``<bos>`` inserted before the prompt) and
Qwen3.5 (a hybrid Gated DeltaNet language model with a Qwen-VL grid).

For each: the controls the app derives from the processor; every render (the checkpoint's defaults, and each
derived control at its ends and start; one picture and two of different sizes) gives the ids vLLM's own
``render_chat_async`` gives for the same messages and ``mm_processor_kwargs`` (an oracle built straight from
vLLM's config, without the app's engine arguments or workarounds), and the ranges the app reports are vLLM's,
covering every image token; the engine starts and streams an answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vlm_demo.errors import InputError
from vlm_demo.registry import EngineArgs, ModelSpec, Sampling
from vlm_demo.service import ChatRequest, ChatService, Done, Turn, to_openai_messages
from vlm_demo.profile import spec_for_directory

from .conftest import make_image

pytestmark = [pytest.mark.engine, pytest.mark.server]


PICTURES = ((1280, 720, 0), (300, 500, 1))
"""The pictures rendered: a wide one and a small portrait one (size and seed)."""


@dataclass(frozen=True)
class Family:
    """One unadapted family's tiny checkpoint and what the app should find in it."""

    name: str
    build: Callable[[Path], None]
    max_model_len: int
    controls: Mapping[str, int]
    """The derived controls, exactly, each starting at the checkpoint's value."""
    counts: tuple[int, ...]
    """Image tokens of the 1280x720 and the 300x500 picture at the checkpoint's settings (the real rule)."""
    images: int = 4
    """Most images a prompt takes (vLLM's limit for the architecture)."""
    start: str = ""
    """The token each image's range starts with ('' where it starts with the image token)."""
    end: str = ""
    """The token each image's range ends with."""
    markers: Mapping[str, tuple[int, ...]] | None = None
    """Other tokens in each picture's range at the checkpoint's settings, with their counts (tile markers,
    row separators)."""
    broken: tuple[Mapping[str, Any], ...] = ()
    """Processor kwargs vLLM 0.32 itself fails on for a picture of ``PICTURES`` (so the app must not offer them)."""
    hybrid: bool = False
    """A hybrid language model (Mamba, linear-attention or convolution layers): on CPU without prefix caching."""


def _lfm2_vl(out: Path) -> None:
    from .tiny_lfm2_vl import build

    build(out)


def _mistral3(out: Path) -> None:
    from .tiny_mistral3 import build

    build(out)


def _qwen3_5(out: Path) -> None:
    from vlm_demo.settings import Settings
    from vlm_demo.tiny_models import tiny_model_dir

    from .tiny_qwen3_5 import build

    build(out, tiny_model_dir("qwen3_vl", Settings.from_env().cache_dir / "tiny-models"))


def _paligemma(out: Path) -> None:
    from .tiny_paligemma import build

    build(out)


FAMILIES = {
    "lfm2_vl": Family(
        "tiny-lfm2-vl", _lfm2_vl, 8192,
        {"max_image_tokens": 256, "max_tiles": 10, "min_image_tokens": 64, "min_tiles": 2, "tile_size": 512},
        # 1280x720 is over 256 tokens x 2.0 tolerance: the 2x1 tile grid (closest to 16:9 of 2-10 tiles), 256 each,
        # and a 672x384 thumbnail, 21x12 = 252; 300x500 alone, resized to 288x512: 9x16 = 144
        (2 * 256 + 252, 144),
        start="<|image_start|>", end="<|image_end|>",
        markers={"<|img_row_1_col_1|>": (1, 0), "<|img_row_1_col_2|>": (1, 0), "<|img_thumbnail|>": (1, 0)},
        # vLLM 0.32's LFM2-VL processor counts tiles from min/max_tiles and always a thumbnail, whatever these say:
        # with either off, the tiled picture's expansion is wrong and the next picture's fails in it (IndexError:
        # index -1 is out of bounds for dimension 0 with size 0), so the app does not offer them
        broken=({"do_image_splitting": False}, {"use_thumbnail": False}), hybrid=True),
    # one token per 28x28 px cell (under the 1540-px longest edge): 46 x 26 and 11 x 18
    "mistral3": Family("tiny-mistral3", _mistral3, 16384, {"size.longest_edge": 1540}, (46 * 26, 11 * 18),
                       end="[IMG_END]", markers={"[IMG_BREAK]": (25, 17), "[IMG_END]": (1, 1)}),
    # SigLIP at 224 px, patch 14: 256 tokens for any picture. The processor's only numbers are size.height/width
    # (224), and vLLM counts 256 tokens whatever they say, so no setting changes a token: no controls
    # a hybrid (Gated DeltaNet + attention) with Qwen3-VL's vision: 32-px cells within size's pixel bounds,
    # smart_resize(720, 1280) = 704x1280: 22 x 40; smart_resize(500, 300) = 512x288: 16 x 9
    "qwen3_5": Family("tiny-qwen3.5", _qwen3_5, 8192, {"size.longest_edge": 16777216, "size.shortest_edge": 65536},
                      (22 * 40, 16 * 9), hybrid=True),
    "paligemma": Family("tiny-paligemma", _paligemma, 2048, {}, (256,), images=1, end="<bos>",
                        markers={"<bos>": (1,)}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], Path]:
    """``built(family)``: the family's tiny checkpoint directory (built once a module)."""
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = tmp_path_factory.mktemp(f"tiny-{family}")
            FAMILIES[family].build(made[family])
        return made[family]
    return get


def spec_of(family: str, directory: Path) -> ModelSpec:
    """The app's entry for the directory: no family (auto, and no adapter matches: generic), no controls."""
    case = FAMILIES[family]
    return ModelSpec(name=case.name, label=family, path=str(directory),
                     engine_args=EngineArgs(max_model_len=case.max_model_len, load_format="dummy", enforce_eager=True,
                                            max_num_seqs=2, limit_mm_per_prompt={"image": case.images}))


class Oracle:
    """vLLM's own chat rendering of a model directory, as ``vllm serve DIR`` renders a chat request: its renderer
    from vLLM's config of the directory (none of the app's engine arguments or workarounds), the chat template
    applied, then the multimodal processor with the request's ``mm_processor_kwargs``."""

    def __init__(self, spec: ModelSpec):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.renderers import TokenizeParams, renderer_from_config

        args = spec.engine_args
        config = AsyncEngineArgs(model=spec.path, max_model_len=args.max_model_len, load_format="dummy",
                                 limit_mm_per_prompt=dict(args.limit_mm_per_prompt)).create_engine_config()
        self.renderer = renderer_from_config(config)
        self.tokenizer = self.renderer.tokenizer
        hf_config = config.model_config.hf_config
        self.image_token_id = getattr(hf_config, "image_token_id", None) or hf_config.image_token_index
        # the OpenAI server's chat request: no special tokens beyond the template's, the context as the limit
        self.tok_params = TokenizeParams(max_total_tokens=config.model_config.max_model_len, add_special_tokens=False)

    async def render(self, messages: list[dict[str, Any]], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        from vllm.renderers import ChatParams

        params = ChatParams(chat_template_kwargs={"add_generation_prompt": True, "continue_final_message": False},
                            mm_processor_kwargs=dict(kwargs) or None)
        _, (out,) = await self.renderer.render_chat_async([messages], params, self.tok_params,
                                                          prompt_extras={"mm_processor_kwargs": dict(kwargs)},
                                                          skip_mm_cache=True)
        return out

    def token(self, text: str) -> int:
        (found,) = self.tokenizer.convert_tokens_to_ids([text])
        return found


def vllm_kwargs(kwarg: str, value: Any) -> dict[str, Any]:
    """One setting as a ``vllm serve`` user sends it in ``mm_processor_kwargs`` (``size.longest_edge`` nested)."""
    head, _, key = kwarg.partition(".")
    return {head: {key: value}} if key else {kwarg: value}


def request(spec: ModelSpec, pictures, kwargs: Mapping[str, Any] | None = None, text: str = "Compare them.",
            sampling: Sampling | None = None) -> ChatRequest:
    images = tuple(make_image(w, h, seed=s) for w, h, s in pictures)
    return ChatRequest(model=spec.name, turns=(Turn("user", text, {"image": images}),), mm_kwargs=dict(kwargs or {}),
                       sampling=sampling)


async def check_render(service: ChatService, oracle: Oracle, case: Family, spec: ModelSpec, pictures,
                       kwarg: str | None = None, value: Any = None) -> None:
    """The app's render of ``pictures`` (with ``kwarg`` at ``value``) against the oracle's: the same ids, the same
    ranges, the config's image token as the app's, every one inside a range, each range's count vLLM's embed count;
    each range's own first and last token; at the checkpoint's settings the real counts and markers."""
    req = request(spec, pictures, {kwarg: value} if kwarg else None)
    ours = await service.inspect(req, start_engine=False)
    theirs = await oracle.render(to_openai_messages(req), vllm_kwargs(kwarg, value) if kwarg else {})
    where = f"{case.name} {len(pictures)} picture(s), {kwarg}={value}"
    assert list(ours.prompt_token_ids) == list(theirs["prompt_token_ids"]), where
    found = theirs["mm_placeholders"]["image"]
    items = ours.items["image"]
    assert [(e.offset, e.length) for e in items] == [(p.offset, p.length) for p in found], where
    assert [e.count for e in items] == [p.get_num_embeds() for p in found], where
    ids = ours.prompt_token_ids
    image_id = items[0].token_id
    assert image_id == oracle.image_token_id and ours.family == "generic", where
    positions = {i for i, t in enumerate(ids) if t == image_id}
    covered = {i for e in items for i in range(e.offset, e.offset + e.length)}
    assert positions <= covered and len(positions) == sum(e.count for e in items), where
    for e in items:
        span = ids[e.offset:e.offset + e.length]
        if case.start:
            assert span[0] == oracle.token(case.start), where
        if case.end:
            assert span[-1] == oracle.token(case.end), where
    if kwarg is None:  # at the checkpoint's settings: the real checkpoint's counts, and the markers in each range
        assert [e.count for e in items] == list(case.counts[:len(pictures)]), where
        for token, counts in (case.markers or {}).items():
            spans = [ids[e.offset:e.offset + e.length] for e in items]
            assert [span.count(oracle.token(token)) for span in spans] == list(counts[:len(pictures)]), (where, token)


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_derived_controls_render_as_vllm_does(family, built, registry, engines, settings, report):
    """The entry has no family and no controls: the generic path, with the processor's controls at the checkpoint's
    values; each render (defaults, every control's ends and start; one picture, then two) is vLLM's own; settings
    vLLM cannot honour are not offered; one picture for PaliGemma, two refused in one line."""
    case = FAMILIES[family]
    t0 = time.perf_counter()
    spec = spec_of(family, built(family))
    service = ChatService(registry.with_model(spec), engines, settings)
    found = await service.controls(spec.name)
    assert found.adapter.name == "generic"
    assert {c.kwarg: found.initial(c.kwarg) for c in found.controls} == case.controls
    oracle = Oracle(spec)
    sets = [PICTURES[:1], PICTURES] if case.images > 1 else [PICTURES[:1]]
    renders = 0
    for pictures in sets:
        await check_render(service, oracle, case, spec, pictures)
        renders += 1
        for c in found.controls:
            values = (True, False) if c.kind == "bool" else (c.min, c.max, found.initial(c.kwarg))
            for value in values:
                await check_render(service, oracle, case, spec, pictures, c.kwarg, value)
                renders += 1
    for kwargs in case.broken:  # vLLM's own render fails, and the app does not offer the setting
        (name, value), = kwargs.items()
        with pytest.raises(Exception):  # noqa: B017 - vLLM's own error, whatever it is
            await oracle.render(to_openai_messages(request(spec, PICTURES)), kwargs)
        with pytest.raises(InputError, match=f"has no setting '{name}'"):
            await service.inspect(request(spec, PICTURES[:1], kwargs), start_engine=False)
    if case.images == 1:  # two pictures: the app says so in one line; so does vLLM where the entry allows more
        with pytest.raises(InputError, match=f"2 images in one message; {spec.name} takes at most 1$"):
            await service.inspect(request(spec, PICTURES), start_engine=False)
        directory = spec_for_directory(registry, Path(spec.path), max_model_len=case.max_model_len)
        assert directory.engine_args.limit_mm_per_prompt["image"] > 1
        with pytest.raises(InputError, match=r"At most 1 image\(s\) may be provided in one prompt"):
            await ChatService(registry.with_model(directory), engines, settings).inspect(
                request(directory, PICTURES), start_engine=False)
    report(f"{family}: {renders} renders checked against vLLM's, controls "
           f"{sorted(c.kwarg for c in found.controls)} ({time.perf_counter() - t0:.1f} s)")


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_the_engine_and_vllm_serve_answer(family, built, registry, engines, settings, report):
    """One engine start a family, and beside it a real ``vllm serve`` of the same directory: the app's endpoint
    entry for it (a served name models.yaml does not know, no family, no controls) gets the same controls, derived
    from the checkpoint the server names (/v1/models root); each render through the server (the checkpoint's
    settings, then every control at its largest) has the local engine's ids; both stream an answer to its end."""
    from vlm_demo.errors import RemoteError

    from .conftest import ARTIFACTS
    from .vllm_server import SCALE_OUT_FLAGS, beside_local_engine

    case = FAMILIES[family]
    spec = spec_of(family, built(family))
    # a hybrid (LFM2-VL) runs without prefix caching on CPU, as the app's engine does (engine/startup.py)
    extra = [*SCALE_OUT_FLAGS, *(["--no-enable-prefix-caching"] if case.hybrid else [])]
    sampling = Sampling(temperature=0.0, max_tokens=8, ignore_eos=True)
    t0 = time.perf_counter()
    async with beside_local_engine(spec, engines, settings, ARTIFACTS / f"vllm-server-{spec.name}.log", extra) as srv:
        started = time.perf_counter() - t0
        remote = ModelSpec(name=f"remote-{spec.name}", label="remote", endpoint=srv.url, served_model_name=spec.name,
                           engine_args=EngineArgs(limit_mm_per_prompt={"image": case.images}))
        service = ChatService(registry.with_model(spec).with_model(remote), engines, settings)
        try:
            local_controls, remote_controls = await service.controls(spec.name), await service.controls(remote.name)
            assert [(c.kwarg, c.min, c.max) for c in remote_controls.controls] == \
                [(c.kwarg, c.min, c.max) for c in local_controls.controls]
            pictures = PICTURES[:case.images]
            for kwargs in ({}, *({c.kwarg: True if c.kind == "bool" else c.max} for c in local_controls.controls)):
                try:
                    theirs = await service.inspect(request(remote, pictures, kwargs))
                except RemoteError as exc:  # e.g. a picture at the largest tile size passes the server's context
                    assert "maximum context length" in str(exc) or "longer than" in str(exc), exc
                    continue
                ours = await service.inspect(request(spec, pictures, kwargs))
                assert theirs.prompt_token_ids == ours.prompt_token_ids, kwargs
            for model in (spec, remote):
                req = request(model, pictures, text="What is in these pictures?", sampling=sampling)
                done = [e async for e in service.chat(req)][-1]
                assert isinstance(done, Done) and done.figures.tokens == 8 and done.figures.finish_reason == "length", done
                assert done.figures.prompt_tokens > sum(case.counts[:case.images])
            if case.hybrid:
                # vLLM 0.32 requires chunked prefill for a hybrid with prefix caching ("Chunked prefill is required
                # for mamba cache mode 'align'"), and with it a seeded request split over engine steps crashed the
                # CPU engine core ("CPU Generator does not use offset"): prefix caching goes off instead, and two
                # seeded answers agree token for token
                config = engines.engine(spec.name)._llm.vllm_config
                assert config.model_config.is_hybrid and config.cache_config.enable_prefix_caching is False
                assert config.scheduler_config.enable_chunked_prefill is False
                seeded = Sampling(temperature=0.8, max_tokens=8, seed=7, ignore_eos=True)
                answers = [[e async for e in service.chat(request(spec, pictures, sampling=seeded))][-1]
                           for _ in range(2)]
                assert all(isinstance(a, Done) and a.figures.tokens == 8 for a in answers), answers
                assert answers[0].answer == answers[1].answer
        finally:
            await engines.shutdown(spec.name)
    report(f"{family}: engine and vllm serve up in {started:.1f} s; controls "
           f"{[c.kwarg for c in remote_controls.controls]} from the server's root; "
           f"{time.perf_counter() - t0:.1f} s in all")
