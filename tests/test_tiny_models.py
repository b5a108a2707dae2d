"""The tiny offline models, one per family that ``vlm_demo.tiny_models`` has a builder for: built in seconds,
deterministic, loadable, with the family's tokens."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from vlm_demo import families, tiny_models
from vlm_demo.tiny_models import tiny_model_dir

WITH_TINY = sorted(tiny_models.FAMILIES)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("family", WITH_TINY)
def test_builds_fast_and_deterministically(family, tmp_path):
    build = tiny_models.builder(family)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    t0 = time.perf_counter()
    build(a)
    elapsed = time.perf_counter() - t0
    build(b)
    assert elapsed < 10, f"{family} took {elapsed:.1f} s"
    assert files(a) == files(b)
    assert "config.json" in files(a) and "tokenizer.json" in files(a)


@pytest.mark.parametrize("family", WITH_TINY)
def test_loads_with_the_family_tokens(family, tmp_path):
    adapter = families.get(family)
    directory = tiny_model_dir(family, tmp_path)
    assert tiny_model_dir(family, tmp_path) == directory  # cached: built once
    model_type = json.loads((directory / "config.json").read_text())["model_type"]
    assert model_type in adapter.model_types
    if family != "ovis":  # vLLM, not transformers, ships Ovis's config class
        assert AutoConfig.from_pretrained(directory, trust_remote_code=True).model_type == model_type
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    image_token = adapter.feature_tokens["image"]
    assert image_token in tokenizer.get_vocab()
    assert len(tokenizer.tokenize(image_token)) == 1
    assert tokenizer.chat_template
    text = "Hello, wörld!"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def test_unknown_family(tmp_path):
    with pytest.raises(KeyError, match="no tiny model"):
        tiny_model_dir("gpt", tmp_path)


def test_two_threads_that_build_the_same_model_both_get_it(tmp_path):
    """Two requests of one process that need the same tiny model at once (its builder just edited, say): one builds,
    the other waits for that build (they shared the build folder and one failed before)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: tiny_model_dir("llava", tmp_path), range(2))
    assert first == second and (first / ".complete").exists()
