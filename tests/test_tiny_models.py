"""The tiny offline models: built in seconds, deterministic, loadable, with each family's tokens."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from vlm_demo.tiny_models import BUILDERS, tiny_model_dir

SPECIAL = {
    "llava": ["<image>"],
    "qwen2_5_vl": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|im_start|>"],
    "internvl": ["<img>", "</img>", "<IMG_CONTEXT>", "<|im_start|>"],
    "ovis": ["<|image_pad|>", "<|im_start|>"],  # "<image>" is plain text in Ovis2
}
MODEL_TYPE = {"llava": "llava", "qwen2_5_vl": "qwen2_5_vl", "internvl": "internvl_chat", "ovis": "ovis"}


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_builds_fast_and_deterministically(family, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    t0 = time.perf_counter()
    BUILDERS[family](a)
    elapsed = time.perf_counter() - t0
    BUILDERS[family](b)
    assert elapsed < 10, f"{family} took {elapsed:.1f} s"
    assert files(a) == files(b)
    assert "config.json" in files(a) and "tokenizer.json" in files(a)


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_loads_with_the_family_tokens(family, tmp_path):
    directory = tiny_model_dir(family, tmp_path)
    assert tiny_model_dir(family, tmp_path) == directory  # cached: built once
    assert json.loads((directory / "config.json").read_text())["model_type"] == MODEL_TYPE[family]
    if family != "ovis":  # vLLM, not transformers, ships Ovis's config class
        assert AutoConfig.from_pretrained(directory, trust_remote_code=True).model_type == MODEL_TYPE[family]
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    for token in SPECIAL[family]:
        assert token in tokenizer.get_vocab(), token
    assert tokenizer.chat_template
    text = "Hello, wörld!"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def test_unknown_family(tmp_path):
    with pytest.raises(KeyError, match="no tiny model"):
        tiny_model_dir("gpt", tmp_path)
