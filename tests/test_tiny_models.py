"""The tiny offline models, one per family that ``vlm_demo.tiny_models`` has a builder for: built in seconds,
deterministic, loadable, with the family's tokens."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from vlm_demo import families, tiny_models
from vlm_demo.tiny_models import tiny_model_dir

WITH_TINY = sorted(tiny_models.FAMILIES)
VLLM_CONFIG_CLASS = {"ovis", "deepseek_ocr", "deepseek_ocr2"}
"""Families whose config class vLLM ships, not transformers (Ovis; DeepSeek-OCR's ``deepseek_vl_v2``)."""


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
    config = json.loads((directory / "config.json").read_text())
    model_type = config["model_type"]
    assert model_type in adapter.model_types or set(config["architectures"]) & set(adapter.architectures)
    assert families.for_model_type(model_type, config["architectures"]) is adapter  # what family: auto finds
    if family not in VLLM_CONFIG_CLASS:
        assert AutoConfig.from_pretrained(directory, trust_remote_code=True).model_type == model_type
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    for token in adapter.feature_tokens.values():
        assert token in tokenizer.get_vocab()
        assert len(tokenizer.tokenize(token)) == 1
    if getattr(importlib.import_module(f"vlm_demo.tiny_models.{family}"), "CHAT_TEMPLATE", "") is None:
        assert not tokenizer.chat_template  # as the checkpoint: vLLM renders with its fallback for the model type
    else:
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


#: The document readers' added tokens at the checkpoints' ids, with whether each is special (dots.ocr: Qwen2.5's 22,
#: then dots' nine, 151643-151673; PaddleOCR-VL: those the template, the config and vLLM name).
READER_TOKENS = {
    "dots_ocr": [(151643 + i, t, True) for i, t in enumerate([
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
        "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
        "<|image_pad|>", "<|video_pad|>"])]
    + [(151657 + i, t, False) for i, t in enumerate([
        "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>"])]
    + [(151665 + i, t, True) for i, t in enumerate([
        "<|imgpad|>", "<|img|>", "<|endofimg|>", "<|systemprompt|>", "<|endofsystemprompt|>", "<|user|>",
        "<|endofuser|>", "<|assistant|>", "<|endofassistant|>"])],
    "paddleocr_vl": [(0, "<unk>", True), (1, "<s>", True), (2, "</s>", True), (100273, "<|begin_of_sentence|>", True),
                     (100295, "<|IMAGE_PLACEHOLDER|>", True), (101305, "<|IMAGE_START|>", True),
                     (101306, "<|IMAGE_END|>", True)],
}


@pytest.mark.parametrize("family", sorted(READER_TOKENS))
def test_reader_tokenizers_carry_the_checkpoints_tokens(family, tmp_path):
    """Each document reader's tiny tokenizer has its checkpoint's added tokens, special where the checkpoint's are, in
    the checkpoint's id order (dots.ocr's at the same distances: one run of 31 ids), each one token; its config names
    the same image token as the checkpoint's does."""
    directory = tiny_model_dir(family, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    added = {token.content: (i, token.special) for i, token in tokenizer.added_tokens_decoder.items()}
    expected = READER_TOKENS[family]
    assert [added[t][1] for _, t, _ in expected] == [special for *_, special in expected]
    ids = [added[t][0] for _, t, _ in expected]
    assert ids == sorted(ids) and all(len(tokenizer.tokenize(t)) == 1 for _, t, _ in expected)
    if family == "dots_ocr":
        assert [i - ids[0] for i in ids] == [real - expected[0][0] for real, *_ in expected]
    config = json.loads((directory / "config.json").read_text())
    image = {"dots_ocr": "<|imgpad|>", "paddleocr_vl": "<|IMAGE_PLACEHOLDER|>"}[family]
    assert config["image_token_id"] == added[image][0]
