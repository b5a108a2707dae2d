"""The tiny LLaVA-OneVision (``llava-hf/llava-onevision-qwen2-0.5b-ov-hf``): its tokenizer's added tokens,
image and video processors (384-px tiles, the 36 anyres pinpoints) and chat template, tiny SigLIP and Qwen2."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
    Qwen2Config,
    SiglipVisionConfig,
)

from ..families.llava_onevision import MAX_TILES, PATCH, PINPOINTS, TILE
from .common import LM_SIZES, VISION_SIZES, build_tokenizer, padded_vocab_size, token_id

# chat_template.json of the llava-hf OneVision checkpoints, as transformers' conversion script
# (models/llava_onevision/convert_llava_onevision_weights_to_hf.py) writes it. Images go first,
# as "<image>\n", so the content format is "openai".
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}"
    "{% endfor %}{# Render all video then #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'video') %}{{ '<video>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
    "'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'text') %}{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
    "{{'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Added tokens of the real tokenizer: Qwen2-0.5B-Instruct's three (ids 151643-151645), then the
#: conversion's <image> (151646, config image_token_index) and <video> (151647, video_token_index).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]


def build(out: Path) -> None:
    """Write a tiny LLaVA-OneVision model directory (real processor geometry, tiny towers) into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE)
    siglip = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 3,
              "size": {"height": TILE, "width": TILE}}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(image_grid_pinpoints=PINPOINTS, do_pad=True, **siglip),
        video_processor=LlavaOnevisionVideoProcessor(**siglip),
        tokenizer=tokenizer,
        num_image_tokens=(TILE // PATCH) ** 2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio=f"anyres_max_{MAX_TILES}",
        chat_template=CHAT_TEMPLATE,
    )
    config = LlavaOnevisionConfig(
        vision_config=SiglipVisionConfig(
            **VISION_SIZES, image_size=TILE, patch_size=PATCH, vision_use_head=False,
        ).to_dict(),
        text_config=Qwen2Config(
            **LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            bos_token_id=token_id(tokenizer, "<|endoftext|>"), eos_token_id=token_id(tokenizer, "<|im_end|>"),
            tie_word_embeddings=False,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "<image>"),
        video_token_index=token_id(tokenizer, "<video>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        image_grid_pinpoints=PINPOINTS,
        vision_aspect_ratio=f"anyres_max_{MAX_TILES}",
        projector_hidden_act="gelu",
        multimodal_projector_bias=True,
        tie_word_embeddings=False,
    )
    config.architectures = ["LlavaOnevisionForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
