"""Tiny Qwen3.5 (``Qwen3_5ForConditionalGeneration``), a hybrid language model of a family with no adapter.

It stands for the hybrid models' tests: three Gated DeltaNet (linear attention) layers to one full attention
layer, which vLLM 0.32 runs only with chunked prefill, and the Qwen3-VL vision tower and processor (16-px
patches, 2x2 merge, ``<|vision_start|><|image_pad|><|vision_end|>``). The tiny model takes the Qwen3-VL tiny
model's tokenizer, chat template and processor files (the same vision tokens and template structure), with the
real config's layout at small sizes: head_dim 256 -> 64 with partial rotary 0.25 (mrope sections [11, 11, 10]
-> [3, 3, 2], summing to half the rotary dims), linear heads of 64 (vLLM's CPU kernel takes 64 or 128),
``full_attention_interval`` 2 over 4 layers. Not checked against the real checkpoint's token list (no network
here): the Qwen3-VL one stands in.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import Qwen3_5Config


def build(out: Path, qwen3_vl_dir: Path) -> None:
    """Write the tiny Qwen3.5 into ``out`` from the tiny Qwen3-VL directory's tokenizer and processor."""
    from vlm_demo.families.qwen3_vl import MERGE, PATCH
    from vlm_demo.tiny_models.common import LM_HIDDEN, VISION_HEADS, VISION_HIDDEN, VISION_INTERMEDIATE, VISION_LAYERS

    shutil.copytree(qwen3_vl_dir, out, dirs_exist_ok=True)
    old = json.loads((out / "config.json").read_text())
    text = old["text_config"]
    config = Qwen3_5Config(
        text_config=dict(
            hidden_size=128, intermediate_size=256, num_hidden_layers=4, full_attention_interval=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=64, vocab_size=text["vocab_size"],
            max_position_embeddings=262144, linear_conv_kernel_dim=4, linear_key_head_dim=64,
            linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "mrope_interleaved": True,
                             "mrope_section": [3, 3, 2], "partial_rotary_factor": 0.25},
            eos_token_id=text["eos_token_id"], bos_token_id=text.get("bos_token_id"), tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=VISION_LAYERS, hidden_size=VISION_HIDDEN, intermediate_size=VISION_INTERMEDIATE,
            num_heads=VISION_HEADS, out_hidden_size=LM_HIDDEN, patch_size=PATCH,
            spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3, num_position_embeddings=2304,
            hidden_act="gelu_pytorch_tanh",
        ),
        image_token_id=old["image_token_id"], video_token_id=old["video_token_id"],
        vision_start_token_id=old["vision_start_token_id"], vision_end_token_id=old["vision_end_token_id"],
        tie_word_embeddings=True,
    )
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    config.save_pretrained(out)
