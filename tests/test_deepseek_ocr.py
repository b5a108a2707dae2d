"""DeepSeek-OCR and DeepSeek-OCR-2 against vLLM 0.32's own code and renderer (no engine): the adapters' counting
rule is vLLM's, a chat renders the documented prompt through vLLM's fallback template, and the resolution modes
(Tiny / Small / Base / Large) are not honoured: whatever the kwargs, the placeholders are Gundam's (issue 39, item 5;
the reason and the vLLM change that would allow them: ``vlm_demo/families/deepseek_ocr.py``)."""

from __future__ import annotations

import pytest

from vlm_demo import families
from vlm_demo.families import deepseek_ocr, deepseek_ocr2

from .conftest import make_image
from .test_families import image_counts, render

READERS = [("tiny-deepseek-ocr", "deepseek_ocr"), ("tiny-deepseek-ocr-2", "deepseek_ocr2")]

MODES = {
    "Tiny": {"base_size": 512, "image_size": 512, "crop_mode": False},
    "Small": {"base_size": 640, "image_size": 640, "crop_mode": False},
    "Base": {"base_size": 1024, "image_size": 1024, "crop_mode": False},
    "Large": {"base_size": 1280, "image_size": 1280, "crop_mode": False},
    "Gundam": {"base_size": 1024, "image_size": 640, "crop_mode": True},
}
"""The modes as DeepSeek-OCR's README and ``DeepSeek-OCR-vllm/config.py`` define them (processor kwargs)."""


def test_the_deepseek_ocr_count_is_vllms():
    """The adapters' tile search and token count are vLLM's (``count_tiles``; the two ``get_num_image_tokens``,
    written out here as the module constants give them) over a sweep of page sizes."""
    from vllm.transformers_utils.processors.deepseek_ocr import count_tiles

    sizes = [(w, h) for w in range(200, 3001, 137) for h in range(200, 3001, 211)] + [(1191, 1684), (1920, 1080)]
    for w, h in sizes:
        for tile in (640, 768):
            expected = (1, 1) if w <= tile and h <= tile else tuple(count_tiles(w, h, image_size=tile))
            assert deepseek_ocr.tiles(w, h, tile) == expected, (w, h, tile)
        cols, rows = deepseek_ocr.tiles(w, h)
        assert deepseek_ocr.count(w, h) == 16 * 17 + 1 + (rows * 10 * (cols * 10 + 1) if cols * rows > 1 else 0)
        cols, rows = deepseek_ocr.tiles(w, h, 768)
        assert deepseek_ocr2.count2(w, h) == 256 + 1 + (144 * cols * rows if cols * rows > 1 else 0)


@pytest.mark.parametrize(("name", "family"), READERS)
async def test_a_chat_renders_the_documented_prompt(renderer, name, family):
    """The checkpoints have no chat template: vLLM 0.32 renders with its ``template_deepseek_ocr.jinja`` (the bos
    token, then the text), the content format is ``string``, and the image placeholder goes before the task's text
    with a newline: the documented ``<image>\\n<|grounding|>Convert the document to markdown.``."""
    r = renderer(name)
    assert not r.tokenizer.chat_template
    task = families.get(family).tasks[0]
    rendered = await render(r, [make_image(1191, 1684)], text=task.prompt)
    assert rendered.content_format == "string"
    assert rendered.prompt == "<｜begin▁of▁sentence｜><image>\n" + task.prompt
    assert image_counts(rendered) == [families.get(family).known_counts["image"][1].count]
    (geometry,) = rendered.geometry["image"]
    tile = 640 if family == "deepseek_ocr" else 768
    assert (geometry.grid, geometry.processed_size, geometry.thumbnail) == ((3, 2), (2 * tile, 3 * tile), True)


async def test_the_resolution_modes_are_gundam_whatever_the_kwargs(renderer):
    """vLLM 0.32 hands a request's ``base_size`` / ``image_size`` / ``crop_mode`` to DeepSeek-OCR's HF processor
    (the pixels follow them) but counts the placeholders with its module constants (Gundam): for every mode the
    placeholder count is Gundam's, not the mode's own, so a mode cannot be offered per request. (Should a vLLM
    release count with the kwargs, this fails, and the modes can become controls.)"""
    r = renderer("tiny-deepseek-ocr")
    for size in [(640, 480), (1191, 1684)]:
        gundam = deepseek_ocr.count(*size)
        for mode, kwargs in MODES.items():
            rendered = await r.render(*_request(r, size), dict(kwargs))  # the service would refuse these kwargs
            (item,) = rendered.engine_input["mm_kwargs"]["image"]
            side = deepseek_ocr.side_tokens(kwargs["base_size"])
            own = (deepseek_ocr.count(*size, base=kwargs["base_size"], tile=kwargs["image_size"]) if kwargs["crop_mode"]
                   else side * (side + 1) + 1)  # the mode's own count: one view, a newline per row, the separator
            assert item["pixel_values"].data.shape[-1] == kwargs["base_size"], mode  # the processor took the mode
            assert image_counts(rendered) == [gundam], (mode, size)  # the placeholders did not
            if mode != "Gundam" and own != gundam:
                assert image_counts(rendered) != [own]


@pytest.mark.parametrize("kwargs", [{"image_size": 512}, {"base_size": 512, "image_size": 512, "crop_mode": False}])
async def test_the_app_refuses_a_modes_kwargs(service, kwargs):
    """The app never sends a mode's kwargs: a family with a fixed geometry offers no control (none derived from
    its processor either), and a kwarg it does not offer is refused in one line, before vLLM. (Sent, Tiny's stops
    the engine core: "Attempted to assign 73 = 73 multimodal tokens to 273 placeholders".)"""
    from vlm_demo.errors import InputError
    from vlm_demo.service import ChatRequest, Turn

    found = await service.controls("tiny-deepseek-ocr")
    assert found.controls == () and found.controls_known and "Gundam" in found.adapter.fixed_geometry
    turn = Turn("user", "Free OCR.", {"image": (make_image(640, 480),)})
    request = ChatRequest(model="tiny-deepseek-ocr", turns=(turn,), mm_kwargs=kwargs)
    with pytest.raises(InputError, match=f"has no setting '{next(iter(kwargs))}'; its settings: none"):
        await service.inspect(request, start_engine=False)


def _request(r, size):
    from vlm_demo.service import ChatRequest, Turn, to_openai_messages

    request = ChatRequest(model=r.spec.name, turns=(Turn("user", "Free OCR.", {"image": (make_image(*size),)}),))
    return (to_openai_messages(request),)


@pytest.mark.parametrize("name", ["deepseek-ocr", "deepseek-ocr-2", "tiny-deepseek-ocr", "tiny-deepseek-ocr-2"])
def test_the_entries_start_as_the_recipe_says(registry, name):
    """vLLM's recipe flags reach the engine and the exported command: the n-gram logits processor, no processor
    cache, and prefix caching off (the entry's choice stands over the app's default, on for known families)."""
    from vlm_demo.engine.startup import serve_kwargs
    from vlm_demo.export import serve_command
    from vlm_demo.profile import resolve

    processor = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"
    kwargs = serve_kwargs(resolve(registry.get(name)))
    assert kwargs["enable_prefix_caching"] is False and kwargs["mm_processor_cache_gb"] == 0
    assert kwargs["logits_processors"] == [processor] and kwargs["max_model_len"] == 8192
    command = serve_command(registry.get(name))
    assert "--no-enable-prefix-caching" in command and f"--logits-processors {processor}" in command


@pytest.mark.parametrize(("name", "family", "features"), [("tiny-deepseek-ocr", "deepseek_ocr", 856),
                                                           ("tiny-deepseek-ocr-2", "deepseek_ocr2", 1120)])
async def test_what_a_page_cost_counts_the_features_alone(service, name, family, features):
    """A page's "text tokens out per vision token in" (issue 39, item 4) over vLLM's render of an A4 page: the
    features alone, as the paper counts them. DeepSeek-OCR's 903 placeholders hold 46 row newlines (16 of the global
    view's, 30 of the 3 rows of crops) and one view separator under the same id: 856 features; OCR-2's 1121 hold one
    separator: 1120. The words under the figure say so."""
    from vlm_demo.service import ChatRequest, Turn
    from vlm_demo.ui.answer import reading_text

    request = ChatRequest(name, (Turn("user", "Free OCR.", {"image": (make_image(1191, 1684),)}),))
    (page,) = (await service.inspect(request, start_engine=False)).items["image"]
    shown = reading_text(families.get(family), [(page, 428)])
    assert f"428 / {features:,} = **{428 / features:.2f}**" in shown
    if family == "deepseek_ocr":
        assert "46 row newline, 1 view separator" in shown and "vision tokens in: 856 of the 903" in shown
    assert reading_text(families.get("qwen2_5_vl"), [(page, 428)]) == ""  # a chat model's picture: not a reading


@pytest.mark.parametrize("name", ["deepseek-ocr", "deepseek-ocr-2", "tiny-deepseek-ocr", "tiny-deepseek-ocr-2"])
def test_each_request_carries_the_recipes_ngram_arguments(registry, settings, name):
    """The recipe's per-request arguments of the n-gram logits processor (ngram_size 30, window_size 90, ``<td>`` and
    ``</td>`` whitelisted) go with every request: ``vllm_xargs`` in the HTTP body (the remote path, Export), which
    vLLM's own request model turns into the ``extra_args`` its processor validates; the in-process engine sends the
    same ``extra_args``. The whitelisted ids are ``<td>`` and ``</td>`` in the checkpoint's tokenizer (the tiny one's
    own ids in its entries)."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.model_executor.models.deepseek_ocr import NGramPerReqLogitsProcessor

    from vlm_demo.engine.openai_request import request_body
    from vlm_demo.export import python_snippet
    from vlm_demo.tiny_models import tiny_model_dir
    from vlm_demo.ui.chat_request import chat_request
    from vlm_demo.ui.controls import Controls

    spec = registry.get(name)
    td = [1080, 1081] if spec.tiny else [128821, 128822]  # (the tiny tokenizer: 256 bytes, then the same tokens)
    xargs = {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": td}
    sent = chat_request(Controls(registry, settings, (), ()), name, (), "", (0.0, 1.0, 64, None), {}).sampling
    assert sent.extra_args == xargs  # the page's request keeps the entry's (it has no control for them)
    body = request_body({"model": name, "messages": [{"role": "user", "content": "Free OCR."}]}, sent)
    assert body["vllm_xargs"] == xargs and 'extra_body={"vllm_xargs": body["vllm_xargs"]}' in python_snippet(body, spec)
    params = ChatCompletionRequest(**body).to_sampling_params(64, {})
    assert params.extra_args == xargs
    NGramPerReqLogitsProcessor.validate_params(params)  # (raises on a wrong type)
    if spec.tiny:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir(spec.family, settings.cache_dir))
        assert tokenizer.convert_ids_to_tokens(xargs["whitelist_token_ids"]) == ["<td>", "</td>"]
