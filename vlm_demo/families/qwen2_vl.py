"""Qwen2-VL (``Qwen/Qwen2-VL-2B-Instruct``): patch 14, merge 2 -> one token per 28x28 px.

The image is resized so each side is a multiple of 28 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 28x28 cell.
"""

from __future__ import annotations

from pathlib import Path


from transformers import Qwen2VLConfig, Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

from . import grounding
from .base import Adapter, Control, KnownCount
from .qwen2_5_vl import CHAT_TEMPLATE, SIZE_ALIASES, count_rule, geometry, video_geometry
from ..tiny_models.common import (
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

# The chat template is Qwen2.5-VL's (Qwen2.5-VL kept Qwen2-VL's unchanged; content format "openai").

#: The checkpoint's preprocessor_config.json bounds on the resized area (images and video frames).
MIN_PIXELS, MAX_PIXELS = 3136, 12845056
FACTOR = 28  # 14-px patches, 2x2 merged into one token


def build(out: Path) -> None:
    """Write a tiny Qwen2-VL model directory into ``out``."""
    # The checkpoint's tokenizer adds exactly Qwen2's 14 special tokens (vocabulary 151657).
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 32768})
    clip_normal = dict(image_mean=[0.48145466, 0.4578275, 0.40821073],
                       image_std=[0.26862954, 0.26130258, 0.27577711])
    geometry_kwargs = dict(patch_size=14, temporal_patch_size=2, merge_size=2,
                           min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, **clip_normal)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**geometry_kwargs), tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(**geometry_kwargs),
                                 chat_template=CHAT_TEMPLATE)
    head_dim = LM_HIDDEN // LM_HEADS
    ids = {name: token_id(tokenizer, tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
        ("vision_token_id", "<|vision_pad|>")]}
    config = Qwen2VLConfig(
        text_config=dict(
            hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
            num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS,
            vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            # The real [16, 24, 24] (of head_dim 128) halved: the sections must sum to head_dim / 2.
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=2, embed_dim=128, hidden_size=LM_HIDDEN, mlp_ratio=4, num_heads=2, hidden_act="quick_gelu",
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
        ),
        tie_word_embeddings=True,
        **ids,
    )
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)


ADAPTER = Adapter(
    name="qwen2_vl", title="Qwen2-VL", model_types=("qwen2_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(Control("min_pixels", label="min_pixels (28x28 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, default=3136),
              Control("max_pixels", label="max_pixels (28x28 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, sizes_cache=True, default=MAX_PIXELS),
              # per video frame only: the checkpoint's video processor takes preprocessor_config.json's bounds
              Control("videos_kwargs.min_pixels", label="video frames: min_pixels (28x28 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, default=MIN_PIXELS),
              Control("videos_kwargs.max_pixels", label="video frames: max_pixels (28x28 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, default=MAX_PIXELS)),
    grounding=grounding.QWEN2_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                   "(preprocessor_config.json: patch 14, merge 2, min_pixels 3136, max_pixels 12845056)"),
        KnownCount((640, 480), 117, "max_pixels 100352 (128x28x28): 364x252 -> 9x13 cells",
                   {"max_pixels": 100352}),
    )},
)
