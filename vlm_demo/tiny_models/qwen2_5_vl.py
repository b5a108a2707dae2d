"""The tiny Qwen2.5-VL (``Qwen/Qwen2.5-VL-3B-Instruct``): its tokenizer's added tokens, processor (14-px patches,
2x2 merge, the checkpoint's pixel bounds) and chat template, with tiny towers (or, with ``CHECKPOINT_SIZES``, the
checkpoint's own: the benchmark's real-size configuration)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

from ..families.qwen2_5_vl import MAX_PIXELS, MIN_PIXELS
from .common import (
    CLIP_NORMALIZE,
    LM_HEAD_DIM,
    LM_HIDDEN,
    LM_SIZES,
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
    QWEN_VL_TOKEN_FIELDS,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_INTERMEDIATE,
    VISION_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    token_ids,
)

# The chat template of Qwen/Qwen2.5-VL-3B-Instruct (content format "openai"); Qwen2-VL's is the same.
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

#: Qwen2-VL's and Qwen2.5-VL's M-RoPE sections: the real [16, 24, 24] (of head_dim 128) scaled to the tiny
#: head_dim (they must sum to head_dim / 2).
MROPE_SECTION = [LM_HEAD_DIM // 8, 3 * LM_HEAD_DIM // 16, 3 * LM_HEAD_DIM // 16]

#: Their configs' token fields: the Qwen-VL ones and ``vision_token_id``.
TOKEN_FIELDS = {**QWEN_VL_TOKEN_FIELDS, "vision_token_id": "<|vision_pad|>"}

#: Qwen/Qwen2.5-VL-3B-Instruct's own sizes (its config.json), as ``build``'s overrides of the text and vision
#: configs: with them and random weights (``load_format="dummy"``) the engine does the checkpoint's work.
CHECKPOINT_SIZES: dict[str, dict[str, Any]] = {
    "text": {
        "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
        "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    },
    "vision": {
        "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
        "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
    },
}


def build(out: Path, sizes: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Write a tiny Qwen2.5-VL model directory into ``out``; ``sizes`` (``CHECKPOINT_SIZES``) overrides fields of
    its ``text`` and ``vision`` configs (tokenizer, processor and chat template stay the same)."""
    sizes = sizes or {}
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS, chat_template=CHAT_TEMPLATE)
    image_processor = Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=2, merge_size=2,
                                            min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, **CLIP_NORMALIZE)
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                    video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)
    config = Qwen2_5_VLConfig(
        text_config=dict(
            **LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": MROPE_SECTION},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ) | dict(sizes.get("text", {})),
        vision_config=dict(
            depth=VISION_LAYERS, hidden_size=VISION_HIDDEN, intermediate_size=VISION_INTERMEDIATE,
            num_heads=VISION_HEADS, out_hidden_size=LM_HIDDEN, patch_size=14, spatial_merge_size=2,
            temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1], in_channels=3,
        ) | dict(sizes.get("vision", {})),
        tie_word_embeddings=True,
        **token_ids(tokenizer, TOKEN_FIELDS),
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
