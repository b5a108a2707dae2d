"""The tiny Qwen2-VL (``Qwen/Qwen2-VL-2B-Instruct``): its tokenizer's special tokens, processor (14-px patches,
2x2 merge, the checkpoint's pixel bounds for images and video frames) and chat template, with tiny towers."""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen2VLConfig, Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

from ..families.qwen2_vl import MAX_PIXELS, MIN_PIXELS
from .common import (
    CLIP_NORMALIZE,
    LM_HIDDEN,
    LM_SIZES,
    QWEN2_SPECIAL_TOKENS,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    token_ids,
)
from .qwen2_5_vl import CHAT_TEMPLATE, MROPE_SECTION, TOKEN_FIELDS  # Qwen2.5-VL kept Qwen2-VL's template


def build(out: Path) -> None:
    """Write a tiny Qwen2-VL model directory into ``out``."""
    # The checkpoint's tokenizer adds exactly Qwen2's 14 special tokens (vocabulary 151657).
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 32768})
    geometry_kwargs = dict(patch_size=14, temporal_patch_size=2, merge_size=2,
                           min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, **CLIP_NORMALIZE)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**geometry_kwargs), tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(**geometry_kwargs),
                                 chat_template=CHAT_TEMPLATE)
    config = Qwen2VLConfig(
        text_config=dict(
            **LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": MROPE_SECTION},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=VISION_LAYERS, embed_dim=VISION_HIDDEN, hidden_size=LM_HIDDEN, mlp_ratio=4, num_heads=VISION_HEADS,
            hidden_act="quick_gelu", patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
        ),
        tie_word_embeddings=True,
        **token_ids(tokenizer, TOKEN_FIELDS),
    )
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
