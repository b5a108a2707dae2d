"""Every family adapter against vLLM's own renderer, without an engine (rendering is all these need):
the real checkpoint's image-token counts, geometry equal to the processor's output, the remote rule
agreeing with it, two images of different sizes; adapters are discovered; the generic path."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from vlm_demo.profile import resolve

from vlm_demo import families, tiny_models
from vlm_demo.registry import load_registry
from vlm_demo.service import ChatRequest, Turn, to_openai_messages
from vlm_demo.profile import spec_for_directory

from .conftest import ROOT, make_clip, make_image, run_cli

TINY = {spec.family: spec.name for spec in load_registry(ROOT / "models.yaml").models
        if spec.tiny and spec.reasoning_parser is None}
"""Family -> its tiny model's registry name."""
CASES = [(name, i) for name, adapter in sorted(families.ADAPTERS.items())
         for i in range(len(adapter.known_counts.get("image", ())))]


async def render(renderer, images, mm_kwargs=None, text="What is in this picture?"):
    spec = renderer.spec
    request = ChatRequest(model=spec.name, turns=(Turn("user", text, {"image": tuple(images)}),))
    return await renderer.render(to_openai_messages(request), resolve(spec).mm_processor_kwargs(mm_kwargs or {}))


def image_counts(rendered) -> list[int]:
    token = rendered.token_ids["image"]
    ids = rendered.prompt_token_ids
    return [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token) for r in rendered.ranges["image"]]


def test_every_adapter_has_a_tiny_model_and_known_counts():
    for name, adapter in families.ADAPTERS.items():
        assert name in tiny_models.FAMILIES and adapter.known_counts, name
        assert name in TINY, f"models.yaml has no tiny entry for {name}"
        assert adapter.model_types or adapter.architectures, name
        assert all(adapter.feature_tokens.get(m) for m in adapter.known_counts), name
    assert tiny_models.FAMILIES <= set(families.ADAPTERS)  # a builder of no family would build for nothing


def test_the_adapters_do_not_import_transformers():
    """The families are what the app knows of each family; the tiny models' builders (``vlm_demo.tiny_models``)
    bring transformers, and knowing which families have one imports none of them."""
    code = ("import sys, vlm_demo.families, vlm_demo.profile, vlm_demo.tiny_models; "
            "found = [m for m in ('transformers', 'tokenizers') if m in sys.modules]; "
            "assert not found, f'{found} imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_the_internvl_tile_search_is_each_processors():
    """The one tile-grid search over each format's candidate grids gives what vLLM's ``internvl_chat`` processor
    and transformers' GotOcr2 (HF-format InternVL) give, ties included: they list the candidates in different
    orders, so a tie between two grids of the same tile count goes differently (10x1 and 5x2 here)."""
    from transformers.models.got_ocr2.image_processing_got_ocr2 import get_optimal_tiled_canvas
    from vllm.transformers_utils.processors.internvl import find_closest_aspect_ratio, get_internvl_target_ratios

    from vlm_demo.families.internvl_tiling import chat_grids, closest_grid, hf_grids

    assert closest_grid(2500, 400, chat_grids(10, 11), 448) == (10, 1)
    assert closest_grid(2500, 400, hf_grids(10, 11), 448) == (5, 2)
    sizes = [(w, h) for w in range(100, 3001, 150) for h in range(100, 3001, 150)] + [(2500, 400), (640, 480)]
    for low, high in [(1, 12), (1, 40), (10, 11), (6, 6), (2, 5)]:
        for w, h in sizes:
            vllm_grid = find_closest_aspect_ratio(w / h, get_internvl_target_ratios(low, high), width=w, height=h,
                                                  image_size=448)
            assert closest_grid(w, h, chat_grids(low, high), 448) == vllm_grid, (w, h, low, high)
            hf_grid = get_optimal_tiled_canvas((h, w), (448, 448), low, high)
            assert closest_grid(w, h, hf_grids(low, high), 448) == tuple(hf_grid), (w, h, low, high)


@pytest.mark.parametrize(("family", "case"), CASES)
async def test_tiny_model_gives_the_real_checkpoints_count(renderer, family, case):
    adapter = families.get(family)
    known = adapter.known_counts["image"][case]
    image = make_image(*known.size)
    rendered = await render(renderer(TINY[family]), [image], dict(known.mm_kwargs))
    assert image_counts(rendered) == [known.count], known.source
    (geometry,) = rendered.geometry["image"]
    assert geometry.orig_size == known.size
    from_count = adapter.geometry_from_count.get("image")
    if from_count is not None:  # the remote rule agrees with the processor's output
        kwargs = rendered.mm_kwargs  # as sent
        assert from_count(known.count, image, kwargs) in (geometry, None)
        assert from_count(known.count + 1, image, kwargs) is None  # never a guess


CLIP_CASES = [(name, i) for name, adapter in sorted(families.ADAPTERS.items())
              for i in range(len(adapter.known_counts.get("audio", ())))]


@pytest.mark.parametrize(("family", "case"), CLIP_CASES)
async def test_tiny_model_gives_the_real_checkpoints_clip_count(renderer, family, case):
    """A clip at a microphone's 48 kHz, stereo: the app resamples it to the model's rate; the count is the
    checkpoint's, and the seconds heard are those its features cover (a family's cap cuts the rest)."""
    adapter = families.get(family)
    known = adapter.known_counts["audio"][case]
    r = renderer(TINY[family])
    request = ChatRequest(model=r.spec.name, turns=(Turn("user", "What is said?", {"audio": (make_clip(known.size),)}),))
    rendered = await r.render(to_openai_messages(request), {})
    token = rendered.token_ids["audio"]
    (found,) = rendered.ranges["audio"]
    ids = rendered.prompt_token_ids[found.offset:found.offset + found.length]
    assert sum(1 for t in ids if t == token) == known.count, known.source
    (geometry,) = rendered.geometry["audio"]
    assert geometry.heard_s is not None and geometry.heard_s <= known.size


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
async def test_qwen_pixel_bounds_use_the_processors_current_api(renderer, family):
    """The Qwen controls keep their names (min_pixels, max_pixels) and go to the processor as its ``size``, which
    transformers 5.19 takes without the FutureWarning it gives for the pixel kwargs (removed in 5.23); each image
    gets what Qwen's smart_resize gives at the moved bounds, the other bound at the checkpoint's value."""
    import warnings

    from vlm_demo.families.qwen_grid import resized

    r = renderer(TINY[family])
    factor = r.model_config.hf_config.vision_config.patch_size * r.model_config.hf_config.vision_config.spatial_merge_size
    low = r.adapter.control("min_pixels").default
    wide, tall = make_image(1280, 720, seed=1), make_image(300, 500, seed=2)
    for kwargs in ({"max_pixels": 200704}, {"min_pixels": 401408, "max_pixels": 802816}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rendered = await render(r, [wide, tall], kwargs)
        if family != "qwen3_vl":  # vLLM 0.32's Qwen3-VL processing adds max_pixels beside size itself (its
            # _complete_mm_processor_size_aliases) and hands both to the image processor: its own warning
            assert not [w for w in caught if "min_pixels" in str(w.message)], [str(w.message) for w in caught]
        assert "max_pixels" not in json.dumps(rendered.mm_kwargs), rendered.mm_kwargs  # what was sent
        bounds = (kwargs.get("min_pixels", low), kwargs["max_pixels"])
        expected = [(h // factor) * (w // factor) for w, h in (resized(*i.size, *bounds, factor) for i in (wide, tall))]
        assert image_counts(rendered) == expected, (kwargs, rendered.mm_kwargs)


async def test_glm_ocr_size_at_its_ends_gives_glms_resize(renderer):
    """GLM-OCR's controls are its processor's ``size`` keys, which vLLM honours per request (it counts the
    placeholders from the processor's own grid): at each end of each control the page offers, the request sends
    ``size`` whole (the other key at the checkpoint's value: the processor refuses half a ``size``) and each picture
    gets what GLM's smart_resize gives for those bounds."""
    from vlm_demo.families.glm_ocr import LONGEST_EDGE, SHORTEST_EDGE, count

    r = renderer(TINY["glm_ocr"])
    found = resolve(r.spec)
    assert [c.kwarg for c in found.controls] == ["size.shortest_edge", "size.longest_edge"]
    wide, tall = make_image(1280, 720, seed=1), make_image(300, 500, seed=2)
    for control in found.controls:
        for value in (control.min, control.max):
            rendered = await render(r, [wide, tall], {control.kwarg: value})
            size = {"shortest_edge": SHORTEST_EDGE, "longest_edge": LONGEST_EDGE, control.kwarg.split(".")[1]: value}
            assert rendered.mm_kwargs == {"size": size}, rendered.mm_kwargs  # as sent
            expected = [count(*i.size, size["shortest_edge"], size["longest_edge"]) for i in (wide, tall)]
            assert image_counts(rendered) == expected, (control.kwarg, value)
            assert [g.grid for g in rendered.geometry["image"]] == [
                (h // 28, w // 28) for w, h in (r.adapter.geometry_from_count["image"](n, i, rendered.mm_kwargs)
                                                .processed_size for n, i in zip(expected, (wide, tall)))]


@pytest.mark.parametrize(("family", "prompt"), [
    ("lightonocr", "<|im_start|>system<|im_end|>\n<|im_start|>user\n<|image_pad|><|im_end|>\n<|im_start|>assistant\n"),
    ("glm_ocr", "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>Text Recognition:<|assistant|>\n"),
])
async def test_a_readers_task_renders_its_cards_prompt(renderer, family, prompt):
    """Each reader's first task as its card sends it: LightOnOCR's the page alone (no text part, which its template
    would end with a newline), GLM-OCR's the page then ``Text Recognition:``."""
    adapter = families.get(family)
    rendered = await render(renderer(TINY[family]), [make_image(640, 480)], text=adapter.tasks[0].prompt)
    assert rendered.prompt == prompt
    assert adapter.document_dpi == 200


@pytest.mark.parametrize("family", sorted(n for n, a in families.ADAPTERS.items() if "image" in a.known_counts))
async def test_two_images_of_different_sizes_expand_as_each_alone(renderer, family):
    """Each image's range holds what it gets alone, in order (vLLM 0.32's Ovis processor failed here)."""
    r = renderer(TINY[family])
    a, b = make_image(640, 480, seed=1), make_image(320, 320, seed=2)
    both = await render(r, [a, b])
    alone = [image_counts(await render(r, [a]))[0], image_counts(await render(r, [b]))[0]]
    assert image_counts(both) == alone
    assert [g.orig_size for g in both.geometry["image"]] == [(640, 480), (320, 320)]
    assert both.geometry_note is None and both.family == family


def test_adapters_key_what_differs_by_modality_by_vllms_modality_names():
    """Tokens, placeholders, markers, geometry, count rules and known counts are keyed by the modality names
    vLLM's inputs take; the families that describe a video's groups have their rule under "video"."""
    from vllm.inputs.llm import MultiModalDataBuiltins

    modalities = MultiModalDataBuiltins.__required_keys__ | MultiModalDataBuiltins.__optional_keys__
    assert {"image", "video", "audio"} <= modalities
    for adapter in (*families.ADAPTERS.values(), families.GENERIC):
        for keyed in ("feature_tokens", "placeholders", "markers", "geometry", "geometry_from_count", "known_counts"):
            assert set(getattr(adapter, keyed)) <= modalities, (adapter.name, keyed)
    assert {name for name, a in families.ADAPTERS.items() if "video" in a.geometry} == {
        "internvl", "internvl_hf", "llava_onevision", "qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "qwen3_vl"}


def test_a_third_modality_is_an_entry_not_a_field():
    """An adapter that knows an audio placeholder gives it as it gives the image's: the engine looks each
    modality up by name (vLLM is asked only for what the adapter leaves out, so no model is needed here)."""
    from vlm_demo.engine.renderer import placeholders

    adapter = families.Adapter(name="speech", title="Speech",
                               placeholders={"image": "<image>", "video": "<video>", "audio": "<|audio|>"})
    assert placeholders(None, adapter, ("image", "video", "audio")) == {
        "image": "<image>", "video": "<video>", "audio": "<|audio|>"}


def test_adding_a_family_is_one_file(tmp_path):
    """The adapters are discovered: a module dropped into the package is a family, with nothing else edited."""
    shutil.copytree(ROOT / "vlm_demo", tmp_path / "vlm_demo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "vlm_demo" / "families" / "my_family.py").write_text(
        "from .base import Adapter\nADAPTER = Adapter(name='my_family', title='Mine', model_types=('mine',))\n")
    code = ("from vlm_demo import families; a = families.for_model_type('mine'); "
            "print(a.name, sorted(families.ADAPTERS))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    name, *_ = out.stdout.split()
    assert name == "my_family" and "'my_family'" in out.stdout


# --- the generic path: a family with no adapter (LLaVA-NeXT) -------------------------------------


@pytest.fixture(scope="module")
def llava_next_dir(tmp_path_factory):
    from .tiny_llava_next import build

    directory = tmp_path_factory.mktemp("tiny-llava-next")
    build(directory)
    return directory


async def test_a_model_with_no_adapter_renders_as_vllm_does(llava_next_dir, registry, engines):
    from vlm_demo.engine.renderer import chat_params

    spec = spec_for_directory(registry, llava_next_dir, max_model_len=8192)
    assert spec.family == "auto" and spec.engine_args.load_format == "dummy"  # llava_next: no adapter
    r = engines.start_renderer(spec)
    images = [make_image(640, 480, seed=3), make_image(320, 320, seed=4)]
    rendered = await render(r, images)
    assert rendered.placeholders == {"image": "<image>"} and rendered.family == "generic"
    assert rendered.geometry_note == "no geometry adapter for llava_next"
    assert image_counts(rendered) == [2340, 1176]  # 640x480: 2x2 tiles of 336 px, as the real checkpoint
    assert [g.grid for g in rendered.geometry["image"]] == [None, None]
    request = ChatRequest(model=spec.name, turns=(Turn("user", "What is in this picture?", {"image": tuple(images)}),))
    # vLLM's one-call renderer, with the tokenize settings the OpenAI server's chat request builds
    server_tok = dataclasses.replace(r._renderer.default_chat_tok_params, add_special_tokens=False)
    _, (reference,) = await r._renderer.render_chat_async([to_openai_messages(request)], chat_params({}), server_tok,
                                                           skip_mm_cache=True)
    assert list(rendered.prompt_token_ids) == list(reference["prompt_token_ids"])


def test_cli_inspects_a_directory_with_no_adapter(llava_next_dir):
    image = ROOT / "assets" / "bar-chart.png"
    out = run_cli("inspect", "--model", str(llava_next_dir), "--image",
                          str(image), "--text", "Best quarter?", "--max-model-len", "8192", "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["family"] == "generic" and data["geometry_note"] == "no geometry adapter for llava_next"
    assert data["images"][0]["placeholder"] == "<image>" and data["images"][0]["count"] > 1000
    assert "Traceback" not in out.stderr


def test_a_text_only_model_is_refused_in_one_line(tmp_path):
    from transformers import Qwen2Config

    from vlm_demo.tiny_models.common import build_tokenizer

    build_tokenizer(["<|endoftext|>"], bos=None, eos="<|endoftext|>").save_pretrained(tmp_path)
    config = Qwen2Config(hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=320)
    config.architectures = ["Qwen2ForCausalLM"]
    config.save_pretrained(tmp_path)
    out = run_cli("inspect", "--model", str(tmp_path), "--text", "hi", timeout=300)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == ("error: tmp: Qwen2ForCausalLM is not a multimodal model in vLLM; "
                                                  "this app needs a model that takes images").replace("tmp", tmp_path.name)


async def test_a_directory_keeps_its_checkpoints_own_settings(registry, engines, settings):
    """A model directory borrows its family's controls, not their defaults: nothing nobody chose is sent, so
    a 1600x400 image expands as ``vllm serve DIR`` expands it (the tiny entry itself sends max_pixels 401408)."""
    from vlm_demo.tiny_models import tiny_model_dir

    directory = tiny_model_dir("qwen2_5_vl", settings.cache_dir / "tiny-models")
    spec = spec_for_directory(registry, directory)
    assert [c.kwarg for c in spec.controls] == ["min_pixels", "max_pixels", "videos_kwargs.max_pixels"]
    assert spec.default_mm_kwargs() == {} and resolve(spec).startup_mm_kwargs() == {}
    assert resolve(spec).initial("max_pixels") == 1003520  # the slider starts at the checkpoint's value, clamped to its range
    own = await render(engines.start_renderer(spec), [make_image(1600, 400)])
    assert image_counts(own) == [798]  # 1596x392: 14x57 cells, the checkpoint's max_pixels (12845056) allows it
    entry = await render(engines.start_renderer(registry.get("tiny-qwen2.5-vl")), [make_image(1600, 400)])
    assert image_counts(entry) == [495]  # the registry entry's own max_pixels default, 401408


async def test_auto_behaves_as_the_named_family(registry, engines, settings):
    """``family: auto`` resolves to the adapter of the checkpoint's model_type, for every layer alike: the
    engine, Detect mode, the video loader's sampling and its frame guard, the page's controls, Export and the
    render (the service, the page and Export once took ``auto`` for "no adapter" while the engine did not)."""
    from vlm_demo.export import chat_completions_body, serve_command
    from vlm_demo.registry import ModelSpec
    from vlm_demo.service import ChatService, detect_request, grounding_of, video_sampling
    from vlm_demo.tiny_models import tiny_model_dir
    from vlm_demo.ui.contract import has_grounding

    entry = registry.get("tiny-qwen2.5-vl")
    directory = str(tiny_model_dir(entry.family, settings.cache_dir / "tiny-models"))
    same = dict(path=directory, engine_args=dataclasses.replace(entry.engine_args, load_format="dummy"),
                controls=entry.controls, sampling=entry.sampling)
    named = ModelSpec(name="named-qwen", label="named", family="qwen2_5_vl", **same)
    auto = ModelSpec(name="auto-qwen", label="auto", family="auto", **same)
    assert resolve(auto).adapter is resolve(named).adapter is families.ADAPTERS["qwen2_5_vl"]
    assert resolve(auto).model_type == "qwen2_5_vl"
    assert video_sampling(resolve(auto)) == video_sampling(resolve(named)) == "fps"
    assert grounding_of(resolve(auto)) is grounding_of(resolve(named)) and has_grounding(auto)
    assert resolve(auto).initial("max_pixels") == resolve(named).initial("max_pixels")
    assert serve_command(auto).replace(auto.name, "X") == serve_command(named).replace(named.name, "X")
    both = ChatService(registry.with_model(named).with_model(auto), engines, settings)
    turn = (Turn("user", "Where is the cat?", {"image": (make_image(1280, 720),)}),)
    requests = [ChatRequest(model=m.name, turns=turn, mm_kwargs={"max_pixels": 200704}) for m in (named, auto)]
    assert chat_completions_body(requests[0], named) == chat_completions_body(requests[1], auto)
    a, b = [await both.inspect(r, start_engine=False) for r in requests]
    assert a.prompt_token_ids == b.prompt_token_ids and a.family == b.family == "qwen2_5_vl"
    assert a.items["image"][0].grid == b.items["image"][0].grid is not None  # the family's geometry rule
    asked = [detect_request(r, both.profile(m.name), "the cat").turns[-1].text for r, m in zip(requests, (named, auto))]
    assert asked[0] == asked[1] != turn[0].text  # Detect mode asks in the family's format


@pytest.mark.parametrize(("name", "derived", "entry_kwargs"), [
    ("tiny-qwen2.5-vl", {"size.longest_edge": 200704}, {"max_pixels": 200704}),
    ("tiny-smolvlm2", {"do_image_splitting": False}, {"do_image_splitting": False}),
    # the crop count changes tokens only with pan-and-scan on: derived with it on (a 1280x720 probe: 2 crops at most)
    ("tiny-gemma3", {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 1},
     {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 1}),
])
async def test_a_model_without_controls_gets_its_processors(name, derived, entry_kwargs, registry, engines, settings):
    """An entry that offers no controls (here the tiny checkpoints with ``family: generic``) gets its processor's:
    whole numbers, true/false and each key of a size dict, at the checkpoint's values, without architecture
    constants and kwargs that change no token (dropped by rendering). Each control's ends and start render; a
    derived value renders the ids the family's own control renders; a value out of range or a name the processor
    does not offer is one line."""
    from vlm_demo.engine.derive_controls import NOT_CONTROLS
    from vlm_demo.errors import InputError
    from vlm_demo.registry import ModelSpec
    from vlm_demo.service import ChatService
    from vlm_demo.tiny_models import tiny_model_dir

    entry = registry.get(name)
    spec = ModelSpec(name=f"generic-{name}", label="generic", family="generic",
                     path=str(tiny_model_dir(entry.family, settings.cache_dir / "tiny-models")),
                     engine_args=dataclasses.replace(entry.engine_args, load_format="dummy"))
    service = ChatService(registry.with_model(spec), engines, settings)
    found = await service.controls(spec.name)
    names = {c.kwarg for c in found.controls}
    assert set(derived) <= names and not {n.partition(".")[0] for n in names} & NOT_CONTROLS, names
    images = (make_image(1280, 720), make_image(300, 500, seed=1))

    def request(model: str, kwargs) -> ChatRequest:
        return ChatRequest(model=model, turns=(Turn("user", "Compare.", {"image": images}),), mm_kwargs=kwargs)
    for c in found.controls:
        values = (True, False) if c.kind == "bool" else (c.min, c.max, found.initial(c.kwarg))
        for value in values:
            await service.inspect(request(spec.name, {c.kwarg: value}), start_engine=False)
    ours = await service.inspect(request(spec.name, derived), start_engine=False)
    theirs = await service.inspect(request(name, entry_kwargs), start_engine=False)
    assert ours.prompt_token_ids == theirs.prompt_token_ids
    if name == "tiny-qwen2.5-vl":  # a size key goes to the image processor alone, the dict whole (video keeps its own)
        assert ours.mm_kwargs == {"images_kwargs": {"size": {"longest_edge": 200704, "shortest_edge": 3136}}}
    slider = next((c for c in found.controls if c.kind == "int"), None)
    if slider is not None:
        with pytest.raises(InputError, match=f"{slider.kwarg}={slider.max + 1} is outside"):
            await service.inspect(request(spec.name, {slider.kwarg: slider.max + 1}), start_engine=False)
    with pytest.raises(InputError, match=f"has no setting 'patch_size'; its settings: .*{sorted(names)[0]}"):
        await service.inspect(request(spec.name, {"patch_size": 28}), start_engine=False)


@pytest.mark.parametrize("family", ["dots_ocr", "paddleocr_vl"])
async def test_reader_controls_at_their_ends_render_the_familys_rule(renderer, family):
    """The document readers on Qwen's resize rule (dots.ocr, PaddleOCR-VL): at the checkpoint's bounds and at each
    end of each of the tiny entry's sliders (the other bound at the checkpoint's value), every picture gets the
    count the rule gives in vLLM's renderer, and what the app draws agrees: the grid from the processor's
    ``image_grid_thw`` holds as many cells, and the remote rule gives that grid. PaddleOCR-VL counts with its own
    rule from ``size`` (``paddleocr_vl.py``, the keys of transformers' processor without remote code) while its
    processor resizes the pixels: both must move together."""
    from vlm_demo.families.qwen_grid import resized

    r = renderer(TINY[family])
    adapter, spec = r.adapter, r.spec
    low, high = adapter.control("min_pixels").default, adapter.control("max_pixels").default
    pictures = [make_image(1280, 720, seed=1), make_image(300, 500, seed=2), make_image(100, 80, seed=3)]
    cases = [{"min_pixels": low, "max_pixels": high}]
    for c in spec.controls:
        other = {"min_pixels": "max_pixels", "max_pixels": "min_pixels"}[c.kwarg]
        cases += [{c.kwarg: value, other: high if other == "max_pixels" else low} for value in (c.min, c.max)]
    for kwargs in cases:
        rendered = await render(r, pictures, kwargs)
        sizes = [resized(*p.size, kwargs["min_pixels"], kwargs["max_pixels"]) for p in pictures]
        expected = [(w // 28) * (h // 28) for w, h in sizes]
        assert image_counts(rendered) == expected, (kwargs, rendered.mm_kwargs)
        for picture, count, size, geometry in zip(pictures, expected, sizes, rendered.geometry["image"]):
            assert geometry.processed_size == size and geometry.grid[0] * geometry.grid[1] == count, kwargs
            assert adapter.geometry_from_count["image"](count, picture, rendered.mm_kwargs) == geometry, kwargs


async def test_dots_ocr_renders_with_its_recipes_string_content_format(service, registry):
    """dots.ocr's templates join a message's content as a string: its recipe serves it with
    ``--chat-template-content-format string`` (the entry's ``chat_template_content_format``), so the app's render and
    Export do too; vLLM puts the placeholder and a newline before the text, and a system prompt and a second turn
    render (detected, the processor's template reads as "openai" and both failed: "can only concatenate str")."""
    from vlm_demo.export import serve_command

    turns = (Turn("user", "OCR:", {"image": (make_image(200, 100),)}), Turn("assistant", "Hi"), Turn("user", "More?"))
    found = await service.inspect(ChatRequest(model="tiny-dots.ocr", turns=turns, system="Be brief."),
                                  start_engine=False)
    assert found.content_format == "string"
    assert found.prompt == ("<|system|>Be brief.<|endofsystem|>\n<|user|><|img|><|imgpad|><|endofimg|>\nOCR:<|endofuser|>"
                            "<|assistant|>Hi<|endofassistant|><|user|>More?<|endofuser|><|assistant|>")
    assert found.items["image"][0].count == 28  # 196x112 px: 4x7 cells
    assert "--chat-template-content-format string" in serve_command(registry.get("dots.ocr"))
    assert "--chat-template-content-format" not in serve_command(registry.get("paddleocr-vl"))


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-paddleocr-vl"])
async def test_a_model_without_an_adapter_takes_the_pixel_names_its_docs_use(name, registry, engines, settings):
    """A model served without an adapter whose processor declares ``size`` edges (its derived controls:
    ``size.shortest_edge``, ``size.longest_edge``) takes ``min_pixels`` / ``max_pixels`` too, the names the checkpoints'
    docs use and vLLM maps onto those edges (it refused them: "has no setting 'min_pixels'"): each renders what the
    edge renders and what the family's own control renders, and the edge's name is what is sent."""
    from vlm_demo.errors import InputError
    from vlm_demo.registry import ModelSpec
    from vlm_demo.service import ChatService
    from vlm_demo.tiny_models import tiny_model_dir

    entry = registry.get(name)
    spec = ModelSpec(name=f"plain-{name}", label="generic", family="generic",
                     path=str(tiny_model_dir(entry.family, settings.cache_dir / "tiny-models")),
                     engine_args=dataclasses.replace(entry.engine_args, load_format="dummy"))
    service = ChatService(registry.with_model(spec), engines, settings)
    found = await service.controls(spec.name)
    assert found.aliases == {"min_pixels": "size.shortest_edge", "max_pixels": "size.longest_edge"}
    images = (make_image(1280, 720), make_image(64, 48, seed=1))  # one the max binds, one the min does

    def request(model: str, kwargs) -> ChatRequest:
        return ChatRequest(model=model, turns=(Turn("user", "Read it.", {"image": images}),), mm_kwargs=kwargs)
    low = found.control("size.shortest_edge").max  # within the derived slider, above the small picture's area...
    named = {"max_pixels": 200704, "min_pixels": low}  # ...and a max below the wide one's
    ours = await service.inspect(request(spec.name, named), start_engine=False)
    edges = await service.inspect(request(spec.name, {"size.longest_edge": 200704, "size.shortest_edge": low}),
                                  start_engine=False)
    family = await service.inspect(request(name, named), start_engine=False)
    plain = await service.inspect(request(spec.name, {}), start_engine=False)
    assert ours.prompt_token_ids == edges.prompt_token_ids == family.prompt_token_ids != plain.prompt_token_ids
    assert "pixels" not in json.dumps(ours.mm_kwargs), ours.mm_kwargs  # sent as the controls' own names
    with pytest.raises(InputError, match=r"max_pixels=9 is outside|size.longest_edge=9 is outside"):
        await service.inspect(request(spec.name, {"max_pixels": 9}), start_engine=False)
    with pytest.raises(InputError, match=r"no setting 'patch_size'; its settings: .*max_pixels \(size.longest_edge\)"):
        await service.inspect(request(spec.name, {"patch_size": 28}), start_engine=False)


RACE = """
import threading, time
from vlm_demo import serving
from vlm_demo.engine.startup import start_renderer, vllm_config
from vlm_demo.settings import Settings
settings = Settings.from_env()
spec = serving.load_registry(settings).get("tiny-qwen2.5-vl")
failed = []
def run(build):
    try:
        build(spec, settings)
    except Exception as exc:
        failed.append(repr(exc)[:300])
threads = [threading.Thread(target=run, args=(build,)) for build in (vllm_config, start_renderer)]
for thread in threads:
    thread.start()
    time.sleep(0.1)
for thread in threads:
    thread.join()
print("failed:", failed)
"""


def test_an_engine_start_and_a_renderer_begun_together_in_a_new_process_both_read_the_model():
    """The app just launched (vLLM and transformers not imported yet): the start-up model's engine start reads its
    config while a first question's renderer is built, 0.1 s apart, each in its own thread. Both read it (before,
    one failed in 5 of 6 tries with "cannot import name 'PreTrainedConfig' from 'transformers'")."""
    out = subprocess.run([sys.executable, "-c", RACE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "failed: []" in out.stdout.splitlines(), [line for line in out.stdout.splitlines() if "failed:" in line]


def test_the_cli_lists_controls_and_prints_no_python_warning(llava_next_dir):
    """``models --controls NAME`` lists a model's controls (a model directory with no entry of its own: its
    processor's); ``inspect --json`` carries them; a Qwen render with max_pixels (which transformers 5.19
    deprecates as a call kwarg, and vLLM 0.32 passes anyway) prints no Python warning on stderr."""
    import re

    def cli(*args: str) -> subprocess.CompletedProcess:
        # as from a shell: without the logging set-up this process's engines left in its environment
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_LOGGING")}
        out = run_cli(*args, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        assert not re.search(r"\w+Warning: ", out.stderr), out.stderr[-2000:]
        return out

    listed = cli("models", "--controls", "tiny-qwen2.5-vl").stdout
    assert re.search(r"^max_pixels +3136\.\.1003520 step 784 +starts at 401408 +\(models.yaml\)$", listed, re.M), listed
    data = json.loads(cli("inspect", "--model", "tiny-qwen2.5-vl", "--image", str(ROOT / "assets" / "bar-chart.png"),
                          "--text", "Best quarter?", "--mm-kwargs", '{"max_pixels": 200704}', "--json").stdout)
    assert {c["kwarg"] for c in data["controls"]} == {"min_pixels", "max_pixels", "videos_kwargs.max_pixels"}
    # a directory of a family without an adapter: its processor's (LLaVA-NeXT's: none that changes a token)
    assert cli("models", "--controls", str(llava_next_dir)).stdout == (f"{llava_next_dir.name} offers no "
                                                                      "per-request processor settings\n")


def test_export_says_why_the_serve_flags_differ_from_the_request(registry):
    """Gemma 3's Export: ``vllm serve`` starts with pan-and-scan at its largest (the encoder cache must fit any
    request), the request sends the page's own values; the command says so next to the flags (it did not, and the
    two looked contradictory: true / 8 against false / 4)."""
    from vlm_demo.export import chat_completions_body, serve_command
    from vlm_demo.service import ChatRequest, Turn

    spec = registry.get("tiny-gemma3")
    command = serve_command(spec)
    assert '"do_pan_and_scan": true' in command and '"pan_and_scan_max_num_crops": 8' in command
    first = command.splitlines()[0]
    assert first.startswith("# --mm-processor-kwargs sizes the encoder cache of the server for the largest values")
    assert "do_pan_and_scan=true" in first and "each request sends its own" in first
    body = chat_completions_body(ChatRequest(model=spec.name, turns=(Turn("user", "Hi"),),
                                             mm_kwargs={"do_pan_and_scan": False}), spec)
    assert body["mm_processor_kwargs"]["do_pan_and_scan"] is False
    assert not serve_command(registry.get("tiny-llava-1.5")).startswith("#")  # nothing sized: nothing to say


def test_the_video_slider_shows_what_is_sent_until_moved(registry, settings):
    """Tiny Qwen2.5-VL: ``max_pixels`` has a default, sent into the video processor's scope too; the video frames'
    ``max_pixels`` slider starts at that value and says whose it is (it showed the checkpoint's 602112 while 401408
    was sent), sends nothing while unmoved, and its own value once moved."""
    from vlm_demo.profile import resolve
    from vlm_demo.ui.contract import control_names
    from vlm_demo.ui.controls import Controls

    controls = Controls(registry, settings, control_names(registry), ())
    props = controls.props("tiny-qwen2.5-vl", "videos_kwargs.max_pixels")
    found = resolve(registry.get("tiny-qwen2.5-vl"))
    sent = found.mm_processor_kwargs(controls.mm_kwargs("tiny-qwen2.5-vl", {
        **{k: None for k in controls.kwargs}, "max_pixels": 401408, "videos_kwargs.max_pixels": props["value"]}))
    assert props["value"] == sent["videos_kwargs"]["size"]["longest_edge"] == 401408
    assert props["label"].endswith("(max_pixels's until moved)")
    moved = found.mm_processor_kwargs(controls.mm_kwargs("tiny-qwen2.5-vl", {
        **{k: None for k in controls.kwargs}, "max_pixels": 401408, "videos_kwargs.max_pixels": 602112}))
    assert moved["videos_kwargs"]["size"]["longest_edge"] == 602112
    assert controls.props("tiny-qwen2.5-vl", "min_pixels")["label"].endswith("(checkpoint's own until moved)")
