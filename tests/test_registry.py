"""models.yaml -> typed specs, and every way an entry can be wrong."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_demo.profile import check, resolve

from vlm_demo.errors import RegistryError, UnknownModelError
from vlm_demo.registry import EngineArgs, load_registry, parse_registry

GOOD = """
models:
  - name: m1
    label: M1
    family: qwen2_5_vl
    repo: org/m1
    engine_args: {max_model_len: 4096, limit_mm_per_prompt: {image: 2}}
    controls:
      - {kwarg: max_pixels, label: max, min: 3136, max: 100000, step: 784, default: 50000}
    sampling: {temperature: 0.2, max_tokens: 32}
  - name: m2
    label: M2
    family: llava
    tiny: true
"""


def parse(text: str):
    return parse_registry(text, Path("/etc/models.yaml"), check)


def test_project_registry_has_the_seed_models(registry):
    repos = {m.repo for m in registry.models if m.repo}
    assert {"OpenGVLab/InternVL2_5-1B-MPO", "AIDC-AI/Ovis2-2B", "llava-hf/llava-1.5-7b-hf",
            "Qwen/Qwen2.5-VL-3B-Instruct"} <= repos
    from vlm_demo import tiny_models

    with_tiny = sorted(tiny_models.FAMILIES)
    # every family has its tiny entry (a thinking variant reuses its family's tiny model)
    assert sorted(m.family for m in registry.models if m.tiny and m.reasoning_parser is None) == with_tiny
    assert {m.family for m in registry.models if m.repo} >= set(with_tiny)  # and a real checkpoint entry
    assert all("random weights" in m.display_label for m in registry.models if m.tiny)
    assert not any("random weights" in m.display_label for m in registry.models if not m.tiny)
    assert registry.default(has_gpu=False).tiny
    assert not registry.default(has_gpu=True).tiny


PAGE_OF_TEXT = 1500
"""Tokens a dense page of text takes as Markdown (500-800 words; a reader's recipe asks 4,096-16,384)."""


def test_a_readers_max_tokens_holds_a_page_within_its_context(registry):
    """Issue 44: each document reader's default max_tokens holds a page's text (the tiny readers had 64) and fits its
    context beside an A4 page at its family's dpi (the real checkpoint's known count)."""
    readers = [m for m in registry.models if resolve(m).adapter.tasks]
    assert {m.family for m in readers} >= {"dots_ocr", "paddleocr_vl", "glm_ocr", "lightonocr", "deepseek_ocr",
                                           "deepseek_ocr2"}
    for spec in readers:
        known = [k for k in resolve(spec).adapter.known_counts.get("image", ())
                 if not k.mm_kwargs and 1.3 < k.size[1] / k.size[0] < 1.5]  # an A4 page, the checkpoint's own settings
        page = max((k.count for k in known), default=0)
        window = spec.engine_args.max_model_len
        assert spec.sampling.max_tokens >= PAGE_OF_TEXT, (spec.name, spec.sampling.max_tokens)
        assert window is None or page + spec.sampling.max_tokens + 64 <= window, (spec.name, page, window)


def test_parses_typed_values():
    reg = parse(GOOD)
    m1 = reg.get("m1")
    assert m1.engine_args.max_model_len == 4096
    assert m1.engine_args.limit_mm_per_prompt == {"image": 2}
    assert m1.controls[0].kwarg == "max_pixels" and m1.controls[0].default == 50000
    assert m1.sampling.temperature == 0.2 and m1.sampling.top_p == 0.9
    # as transformers' current API takes it: each processor's whole size, its other edge at the checkpoint's
    assert resolve(m1).startup_mm_kwargs() == {"images_kwargs": {"size": {"longest_edge": 100000, "shortest_edge": 3136}},
                                               "videos_kwargs": {"size": {"longest_edge": 100000, "shortest_edge": 100352}}}
    assert m1.default_mm_kwargs() == {"max_pixels": 50000}
    with pytest.raises(dataclasses.FrozenInstanceError):
        m1.label = "x"  # type: ignore[misc]
    with pytest.raises(UnknownModelError, match="m3"):
        reg.get("m3")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("    family: llava\n", "    family: llava\n    colour: red\n"), "model 'm2': key 'colour': unknown key"),
        (("max_model_len: 4096", "max_modle_len: 4096"), "model 'm1': key 'engine_args.max_modle_len': unknown key"),
        (("max_model_len: 4096", "max_model_len: lots"), "model 'm1': key 'engine_args.max_model_len'"),
        (("temperature: 0.2", "temperature: 9"), "model 'm1': key 'sampling.temperature'"),
        (("default: 50000", "default: 500000"), "model 'm1': key 'controls.0'"),
        (("kwarg: max_pixels", "kwarg: max_partition"), "model 'm1'.*max_partition"),
        (("family: llava", "family: gpt"), "model 'm2'.*unknown family 'gpt'"),
        (("    tiny: true\n", ""), "model 'm2'.*exactly one of repo, path, tiny: true or endpoint"),
        (("name: m2", "name: m1"), "model 'm1': key 'name': duplicate"),
        (("default: 50000", "default: true"), "model 'm1'.*checkbox .bool default. takes no min or max"),
        (("default: 50000", "default: lots"), "model 'm1': key 'controls.0.default"),
        (("    family: llava\n    tiny", "    tiny"), "model 'm2'.*tiny entry needs a family"),
        (("name: m2", "name: 'bad name'"), "key 'name'"),
    ],
)
def test_bad_entries_name_file_model_and_key(edit, expected):
    old, new = edit
    assert old in GOOD
    with pytest.raises(RegistryError, match=expected) as info:
        parse(GOOD.replace(old, new, 1))
    assert str(info.value).startswith("/etc/models.yaml: ")


def test_bad_files(tmp_path):
    with pytest.raises(RegistryError, match="cannot read"):
        load_registry(tmp_path / "missing.yaml")
    with pytest.raises(RegistryError, match="not valid YAML"):
        parse("models: [")
    with pytest.raises(RegistryError, match="one top-level key 'models'"):
        parse("model: []")


def test_relative_paths_resolve_against_the_file(tmp_path):
    (tmp_path / "models.yaml").write_text("models:\n  - {name: local, label: L, family: llava, path: ckpt}\n")
    assert load_registry(tmp_path / "models.yaml").get("local").path == str(tmp_path / "ckpt")


def test_engine_args_use_vllms_own_names():
    from vllm.engine.arg_utils import AsyncEngineArgs

    vllm_fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    ours = {f.name for f in dataclasses.fields(EngineArgs)}
    assert ours <= vllm_fields, ours - vllm_fields


def test_a_kwarg_given_unscoped_and_scoped_goes_into_every_scope():
    """Given both ways, transformers applies neither to images (while vLLM hashes as if one applied): the
    unscoped value goes into each scope that does not set its own; other kwargs stay as they are."""
    from vlm_demo.registry import flat_kwargs, processor_kwargs

    assert processor_kwargs({"max_pixels": 2, "min_pixels": 1}) == {"max_pixels": 2, "min_pixels": 1}
    nested = processor_kwargs({"max_pixels": 2, "min_pixels": 1, "videos_kwargs.max_pixels": 3})
    assert nested == {"min_pixels": 1, "videos_kwargs": {"max_pixels": 3}, "images_kwargs": {"max_pixels": 2}}
    assert flat_kwargs(nested) == {"min_pixels": 1, "videos_kwargs.max_pixels": 3, "images_kwargs.max_pixels": 2}


def test_qwen_pixel_bounds_go_as_the_processors_size():
    """transformers 5.19 deprecates Qwen's ``min_pixels`` / ``max_pixels`` call kwargs (FutureWarning, gone in
    5.23): the controls keep those names, and a request sends each processor's ``size`` whole, the edge not moved
    at that processor's checkpoint value (Qwen2.5-VL's video processor has its own bounds)."""
    from vlm_demo.families.qwen2_5_vl import ADAPTER
    from vlm_demo.registry import processor_kwargs

    found = resolve(parse(GOOD).get("m1"))
    assert found.adapter is ADAPTER
    assert found.mm_processor_kwargs({"min_pixels": 6272, "videos_kwargs.max_pixels": 200704}) == {
        "images_kwargs": {"size": {"shortest_edge": 6272, "longest_edge": 50000}},
        "videos_kwargs": {"size": {"shortest_edge": 6272, "longest_edge": 200704}}}
    assert found.control_names({"size.longest_edge": 1, "videos_kwargs.size.shortest_edge": 2}) == {
        "max_pixels": 1, "videos_kwargs.min_pixels": 2}
    # a derived dict control (no alias, one checkpoint dict) goes unscoped, filled from it
    assert processor_kwargs({"size.longest_edge": 5}, {"size": {"longest_edge": 9, "shortest_edge": 1}}) == {
        "size": {"longest_edge": 5, "shortest_edge": 1}}


def test_reading_the_registry_imports_neither_vllm_nor_an_adapter():
    """The registry is the first layer: models.yaml is read and checked with no vLLM and no family adapter loaded
    (the checks that need them are ``profile.check`` and ``engine.check_spec``, passed in by the app)."""
    code = ("import sys; from pathlib import Path; from vlm_demo.registry import load_registry; "
            "assert load_registry(Path('models.yaml')).models; "
            "bad = [m for m in sys.modules if m == 'vllm' or m.startswith(('vllm.', 'vlm_demo.families'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, check=True)
