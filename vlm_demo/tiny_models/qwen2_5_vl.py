"""Tiny Qwen2.5-VL (``Qwen/Qwen2.5-VL-3B-Instruct`` layout): patch 14, merge 2 -> one token per 28x28 px."""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

from .common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
    QWEN2_SPECIAL_TOKENS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

# The chat template of Qwen/Qwen2.5-VL-3B-Instruct (content format "openai").
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or "
    "'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = "
    "video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = QWEN2_SPECIAL_TOKENS


def build(out: Path) -> None:
    """Write a tiny Qwen2.5-VL model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE)
    image_processor = Qwen2VLImageProcessor(
        patch_size=14, temporal_patch_size=2, merge_size=2,
        min_pixels=3136, max_pixels=12845056,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                    video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)
    head_dim = LM_HIDDEN // LM_HEADS
    ids = {name: token_id(tokenizer, tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
        ("vision_token_id", "<|vision_pad|>")]}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
            num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS,
            vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=2, hidden_size=128, intermediate_size=256, num_heads=2, out_hidden_size=LM_HIDDEN,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
            fullatt_block_indexes=[1], in_channels=3,
        ),
        tie_word_embeddings=True,
        **ids,
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
