"""LLaVA-1.5 (``llava-hf/llava-1.5-7b-hf``): CLIP ViT-L/14 at 336 px -> 576 image tokens.

The image is resized (short side 336) and center-cropped to 336x336; ``<image>`` expands to 576
``<image>`` ids whatever the image size. No per-request kwargs.
"""

from __future__ import annotations

import math
from pathlib import Path

from collections.abc import Mapping
from typing import Any

from PIL import Image
from tokenizers import processors
from transformers import CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaProcessor

from .base import Adapter, ItemGeometry, KnownCount
from ..tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

# The chat template of llava-hf/llava-1.5-7b-hf (content format "openai": it emits <image> itself).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}"
    "{% endif %}{# Render all images first #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] "
    "!= 'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] + ' '}}{% endgeneration %}"
    "{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def build(out: Path) -> None:
    """Write a tiny LLaVA-1.5 model directory into ``out``."""
    tokenizer = build_tokenizer(["<unk>", "<s>", "</s>", "<image>", "<pad>"], bos="<s>", eos="</s>",
                                pad="<pad>", unk="<unk>", chat_template=CHAT_TEMPLATE)
    # Like the real LlamaTokenizerFast: <s> in front when special tokens are added.
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", token_id(tokenizer, "<s>"))])
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": 336},
        crop_size={"height": 336, "width": 336},
        do_center_crop=True,
        resample=3,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            image_size=336, patch_size=14, projection_dim=128,
        ).to_dict(),
        text_config=LlamaConfig(
            hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
            num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS,
            vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=4096,
            bos_token_id=token_id(tokenizer, "<s>"), eos_token_id=token_id(tokenizer, "</s>"),
            pad_token_id=token_id(tokenizer, "<pad>"), tie_word_embeddings=False,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "<image>"),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    config.architectures = ["LlavaForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The crop the vision tower saw (336x336); no grid."""
    h, w = fields["pixel_values"].shape[-2:]
    return ItemGeometry(image.size if image else None, (int(w), int(h)), None, None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """One token per 14-px patch of the square input."""
    side = math.isqrt(count)
    return ItemGeometry(image.size, (side * 14, side * 14), None, None) if side * side == count else None


ADAPTER = Adapter(
    name="llava", title="LLaVA-1.5", model_types=("llava",), feature_tokens={"image": "<image>"},
    placeholders={"image": "<image>"}, center_crop=True, geometry={"image": geometry},
    geometry_from_count={"image": geometry_from_count}, build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 576, "CLIP 336 px crop, patch 14: (336/14)^2 = 576 for any image size"),
        KnownCount((320, 900), 576, "the same crop for a tall image"),
    )},
)
