"""Audit a serving deployment (issue 25): a server's render of a request against vLLM's reference renderer.

The verdict's rules on made-up prompts first (no engine); then real ``vllm serve`` servers of the tiny Qwen2.5-VL,
each started with real flags: one with other processor settings (``--mm-processor-kwargs``) and another chat
template (render endpoint), one plain behind ``--api-server-count 2`` without the render endpoint (audited by the
ids a chat completion returns), one with a template that emits no image placeholder. Every tiny family's plain
server is audited in ``test_vllm_server.py`` (its servers are shared there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vlm_demo.engine import EngineManager, ItemRange, RenderedPrompt
from vlm_demo.engine.server_prompt import RENDER, RETURNED_IDS, USAGE_COUNTS, ServerPrompt
from vlm_demo.inspector.verdict import DIFFERS, EQUAL, UNCHECKED, verdict
from vlm_demo.profile import spec_for_endpoint
from vlm_demo.registry import Registry
from vlm_demo.service import ChatRequest, Turn
from vlm_demo.service.audit import Auditor
from vlm_demo.settings import Settings

from .conftest import ARTIFACTS, make_image, run_cli
from .vllm_server import SCALE_OUT_FLAGS, Server, servers_beside_local_engine



IMG, TEXT = 9, 5


def rendered(ids: tuple[int, ...], ranges: tuple[ItemRange, ...], mm_kwargs=None) -> RenderedPrompt:
    return RenderedPrompt(model="m", family="f", content_format="openai", conversation=(),
                          prompt="<s>user <img><|image|></img> What?</s>", prompt_token_ids=ids,
                          ranges={"image": ranges}, geometry={}, token_ids={"image": IMG},
                          placeholders={"image": "<|image|>"}, geometry_note=None, mm_kwargs=mm_kwargs or {},
                          max_model_len=100, engine_input=None)


def runs(ids):
    return [("<|image|>" if i == IMG else f"t{i}", 1) for i in ids]


REFERENCE = rendered((1, 2, IMG, IMG, IMG, 3, TEXT), (ItemRange(2, 3),), {"max_pixels": 100})


def test_equal_ids_are_equal():
    v = verdict(REFERENCE, ServerPrompt(RENDER, ids=REFERENCE.prompt_token_ids, prompt_tokens=7), runs)
    assert v.status == EQUAL and v.exit_code == 0 and [(i.reference, i.server) for i in v.items] == [(3, 3)]


def test_fewer_tokens_per_picture_name_the_settings():
    v = verdict(REFERENCE, ServerPrompt(RETURNED_IDS, ids=(1, 2, IMG, 3, TEXT), prompt_tokens=5), runs,
                "; HINT")
    assert v.status == DIFFERS and v.exit_code == 1 and v.first_difference == 3
    assert [(i.reference, i.server) for i in v.items] == [(3, 1)]
    assert len(v.causes) == 1 and "a different token count per image (image 1: 3 here, 1 there)" in v.causes[0]
    assert "max_pixels=100" in v.causes[0] and v.causes[0].endswith("; HINT")


def test_other_text_is_a_template_difference():
    v = verdict(REFERENCE, ServerPrompt(RENDER, ids=(2, IMG, IMG, IMG, 3, TEXT), content_format="string"), runs)
    assert v.status == DIFFERS and v.first_difference == 0
    assert v.causes == ("a different chat template or system prompt: the text around the pictures differs; a "
                        "different content format too (the server's template: string, the model's: openai)",)
    assert v.reference_text.startswith("t1t2<|image|>") and v.server_text.startswith("t2<|image|>")


def test_no_placeholder_in_the_servers_prompt():
    v = verdict(REFERENCE, ServerPrompt(RETURNED_IDS, ids=(1, 2, 3, TEXT)), runs)
    assert v.status == DIFFERS and any(c.startswith("placeholders missing from the prompt") for c in v.causes)


def test_a_refusal_for_a_missing_placeholder_shows_where_it_belongs():
    v = verdict(REFERENCE, ServerPrompt(RENDER, error="500: Failed to apply prompt replacement for "
                                                      "mm_items['image'][0]"), runs)
    assert v.status == DIFFERS and "puts no <|image|> in the prompt" in v.causes[0]
    assert "'<s>user <img><|image|></img> What?</s>'" in v.causes[0]


def test_other_refusals_could_not_check():
    untrusted = verdict(REFERENCE, ServerPrompt(RENDER, error="400: ... Start the server with "
                                                              "--trust-request-mm-kwargs only when"), runs)
    assert untrusted.status == UNCHECKED and untrusted.exit_code == 2 and "--mm-kwargs" in untrusted.causes[0]
    assert verdict(REFERENCE, ServerPrompt(RENDER, error="503: busy"), runs).status == UNCHECKED


def test_count_only_says_so():
    same = verdict(REFERENCE, ServerPrompt(USAGE_COUNTS, prompt_tokens=7), runs)
    assert same.status == EQUAL and same.note.startswith("count-only")
    fewer = verdict(REFERENCE, ServerPrompt(USAGE_COUNTS, prompt_tokens=5), runs)
    assert fewer.status == DIFFERS and "2 prompt tokens fewer" in fewer.causes[0]
    assert verdict(REFERENCE, ServerPrompt(USAGE_COUNTS), runs).status == UNCHECKED


def test_two_pictures_split_by_the_references_runs():
    two = rendered((1, IMG, IMG, 3, IMG, IMG, IMG, IMG, TEXT), (ItemRange(1, 2), ItemRange(4, 4)))
    v = verdict(two, ServerPrompt(RENDER, ids=(1, IMG, 3, IMG, IMG, TEXT)), runs)
    assert [(i.index, i.reference, i.server) for i in v.items] == [(0, 2, 1), (1, 4, 2)]


# --- real servers ------------------------------------------------------------------------------------------

MODEL = "tiny-qwen2.5-vl"
SMALL = 50176
"""The server-wide max_pixels of the misconfigured server (the checkpoint's is far larger): 64 tokens at most."""


def template(registry: Registry, engines: EngineManager, change) -> str:
    """The model's own chat template, changed by ``change``."""
    config = json.loads((Path(engines.model_path(registry.get(MODEL), weights=False)) / "tokenizer_config.json")
                        .read_text())
    own = config.get("chat_template") or (Path(engines.model_path(registry.get(MODEL), weights=False))
                                          / "chat_template.jinja").read_text()
    changed = change(own)
    assert changed != own
    return changed


def without_default_system(own: str) -> str:
    return own.replace("You are a helpful assistant.", "You are a terse assistant.")


def without_placeholder(own: str) -> str:
    return own.replace("<|vision_start|><|image_pad|><|vision_end|>", "")


@pytest.fixture(scope="module")
def picture():
    return make_image(640, 480)


def auditor(registry: Registry, server: Server, settings: Settings) -> Auditor:
    spec = spec_for_endpoint(registry, server.url, MODEL, "qwen2_5_vl")
    return Auditor.of(registry.with_model(spec), spec.name, EngineManager(settings), settings)


def ask(picture, **mm_kwargs) -> ChatRequest:
    return ChatRequest(model=f"remote-{MODEL}", turns=(Turn("user", "What is in this picture?", {"image": (picture,)}),),
                       mm_kwargs=mm_kwargs)


SERVERS = {
    # name: (flags, a change to the model's chat template or None)
    "misconfigured": ((*SCALE_OUT_FLAGS, "--mm-processor-kwargs", json.dumps({"max_pixels": SMALL})),
                      without_default_system),  # other processor settings and another template, render endpoint on
    "api-servers": (("--api-server-count", "2"), None),  # vLLM's scale-out front end on one node, no render endpoint
    "no-placeholder": (SCALE_OUT_FLAGS, without_placeholder),
}


@pytest.fixture(scope="module")
async def servers(registry, engines, settings, tmp_path_factory) -> dict[str, Server]:
    """The module's three servers of the tiny Qwen2.5-VL, started at once (their start-ups overlap)."""
    launches = []
    for name, (flags, change) in SERVERS.items():
        extra = list(flags)
        if change is not None:
            path = tmp_path_factory.mktemp(name) / "template.jinja"
            path.write_text(template(registry, engines, change))
            extra += ["--chat-template", str(path)]
        launches.append((ARTIFACTS / f"vllm-server-audit-{name}.log", extra))
    async with servers_beside_local_engine(registry.get(MODEL), engines, settings, launches) as started:
        yield dict(zip(SERVERS, started))


@pytest.fixture(scope="module")
def misconfigured(servers) -> Server:
    return servers["misconfigured"]


async def test_other_processor_settings_and_template_are_named(misconfigured, registry, settings, picture):
    v = await auditor(registry, misconfigured, settings).audit(ask(picture))
    assert v.status == DIFFERS and v.how == RENDER, v.text()
    (item,) = v.items
    assert item.server < item.reference, v.text()
    counts, template_cause = v.causes
    assert counts.startswith("a different token count per image") and "none: the checkpoint's own" in counts
    assert "the server likely runs with max_pixels near" in counts, counts
    assert template_cause.startswith("a different chat template or system prompt"), v.causes
    assert "helpful" in v.reference_text and "terse" in v.server_text, (v.reference_text, v.server_text)


@pytest.fixture(scope="module")
def scaled_out(servers) -> Server:
    return servers["api-servers"]


def test_two_api_servers_without_render_are_equal_by_returned_ids(scaled_out):
    """``audit --sweep``: one and two pictures, each picture control at its smallest, default and largest value;
    every case equal, read from the ids a chat completion returns (no render endpoint)."""
    out = run_cli("audit", "--endpoint", scaled_out.url, "--model", MODEL, "--family", "qwen2_5_vl", "--sweep", "--json")
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout
    results = json.loads(out.stdout)
    assert [r["case"] for r in results][:2] == ["one picture", "two pictures"]
    assert {"min_pixels=3136", "max_pixels=1003520"} <= {r["case"] for r in results}, [r["case"] for r in results]
    assert all(r["status"] == EQUAL and r["how"] == RETURNED_IDS for r in results), results
    assert [len(r["items"]) for r in results][:2] == [1, 2] and "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def no_placeholder(servers) -> Server:
    return servers["no-placeholder"]


def test_a_template_without_the_placeholder_is_named(no_placeholder):
    out = run_cli("audit", "--endpoint", no_placeholder.url, "--model", MODEL, "--family", "qwen2_5_vl")
    assert out.returncode == 1, out.stderr[-2000:] + out.stdout
    assert re.search(r"the server's chat template puts no \S*<\|image_pad\|>\S* in the prompt", out.stdout), out.stdout
    assert "Failed to apply prompt replacement" in out.stdout  # (vLLM's words, and where the placeholder belongs:)
    assert re.search(r"the model's own template puts it here: '.*<\|vision_start\|><\|image_pad\|>", out.stdout)
    assert "Traceback" not in out.stderr


def test_the_page_shows_the_verdict_beside_an_endpoint_models_answer(misconfigured, registry, engines, settings,
                                                                     tmp_path, monkeypatch):
    """The page: an answer of an endpoint model carries the audit's badge above its rendered prompt (details
    on click): here "differs", the template named."""
    from gradio_client import Client

    from vlm_demo.service import ChatService

    from .app_harness import chat_args, page, run

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    spec = spec_for_endpoint(registry, misconfigured.url, MODEL, "qwen2_5_vl")
    service = ChatService(registry.with_model(spec), engines, settings)
    path = tmp_path / "picture.png"
    make_image(640, 480).save(path)
    with page(service) as url:
        client = Client(url, verbose=False)
        out = run(client.submit(*chat_args(service.registry, path, model=spec.name, max_tokens=4), api_name="/chat"),
                  client)
    assert out["stats_data"]["status"] == "done", out["stats_data"]
    prompt = out["prompt"]
    assert 'id="audit"' in prompt and "server render audit: <b>differs</b>" in prompt, prompt[:500]
    assert "a different chat template or system prompt" in prompt  # (the sliders' values go with the request)
