"""The benchmark's real-size configuration (``bench/real_size.py``): the tiny Qwen2.5-VL builder with
Qwen2.5-VL-3B-Instruct's sizes writes that checkpoint's dimensions, with the tiny model's tokenizer and processor."""

from __future__ import annotations

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from vlm_demo.tiny_models.qwen2_5_vl import CHECKPOINT_SIZES, build


def test_the_real_size_model_has_the_checkpoints_dimensions(tmp_path):
    real, tiny = tmp_path / "real", tmp_path / "tiny"
    real.mkdir(), tiny.mkdir()
    build(real, CHECKPOINT_SIZES)
    build(tiny)
    config = Qwen2_5_VLConfig.from_pretrained(real)
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads,
            text.intermediate_size, text.vocab_size, text.max_position_embeddings) == (
        2048, 36, 16, 2, 11008, 151936, 128000)
    assert text.rope_parameters["mrope_section"] == [16, 24, 24]  # sums to head_dim / 2 (128 / 2)
    assert config.tie_word_embeddings and text.rms_norm_eps == 1e-6
    assert (vision.depth, vision.hidden_size, vision.intermediate_size, vision.num_heads, vision.out_hidden_size,
            vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size, vision.window_size,
            vision.fullatt_block_indexes) == (32, 1280, 3420, 16, 2048, 14, 2, 2, 112, [7, 15, 23, 31])
    with torch.device("meta"):  # no memory, no weights: the parameter count of the checkpoint (3.75 B)
        params = sum(p.numel() for p in Qwen2_5_VLForConditionalGeneration(config).parameters())
    assert 3.7e9 < params < 3.8e9, params
    assert (Qwen2_5_VLConfig.from_pretrained(tiny).text_config.hidden_size, text.hidden_size) == (128, 2048)
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json", "chat_template.jinja"):
        assert (real / name).read_bytes() == (tiny / name).read_bytes(), name
