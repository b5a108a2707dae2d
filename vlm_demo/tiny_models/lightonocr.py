"""The tiny LightOnOCR (``lightonai/LightOnOCR-2-1B``; the files read are ``LightOnOCR-1B-1025``'s): Mistral 3's
config with LightOnOCR's architecture, Pixtral's processor (1540-px longest edge, 14-px patches merged 2x2), the
Qwen3 tokenizer's added tokens and LightOnOCR's chat template, with tiny towers.

Where the values come from (``LightOnOCR-1B-1025``'s files as copied whole into a GitHub project; LightOnOCR-2-1B's
were not found, its card tags it ``mistral3`` too):
- config.json: architectures ``LightOnOCRForConditionalGeneration``, model_type ``mistral3`` (vLLM 0.32 reads it as
  ``Mistral3Config``), image_token_id 151655 (``<|image_pad|>``), spatial_merge_size 2, projector gelu without bias,
  vision_feature_layer -1; vision ``pixtral`` (image_size 1540, patch 14, head_dim 64, rope_theta 10000, silu); text
  ``qwen3`` (head_dim 128, vocab 151936, max_position_embeddings 8192, rope_theta 1e6, rms_norm_eps 1e-6, tied
  embeddings).
- preprocessor_config.json: ``PixtralImageProcessorFast``, size ``{"longest_edge": 1540}``, patch_size 14, resample
  3 (bicubic), CLIP mean/std, rescale 1/255, do_pad null (vLLM pads itself and un-pads per image).
- processor_config.json: patch_size 14, spatial_merge_size 2, image ``<|image_pad|>``, break ``<|vision_pad|>``, end
  ``<|vision_end|>``; processor_class ``LightOnOCRProcessor`` (kept: vLLM builds ``PixtralProcessor`` itself).
- tokenizer_config.json: Qwen3's 26 added tokens (``<|endoftext|>`` 151643 .. ``</think>`` 151668: Qwen2's 14 special
  ones, then 12 plain ones), eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos, model_max_length 131072.
- chat_template.jinja: verbatim (an empty system turn first, ``<|image_pad|>`` for an image part; content format
  "openai").
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import Mistral3Config, PixtralImageProcessor, PixtralProcessor, PixtralVisionConfig, Qwen3Config

from ..families.lightonocr import LONGEST_EDGE, MERGE, PATCH
from .common import (
    CLIP_NORMALIZE,
    LM_HEAD_DIM,
    LM_SIZES,
    QWEN2_SPECIAL_TOKENS,
    QWEN3_PLAIN_TOKENS,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}\n{% for message in messages %}\n"
    "{% if loop.first and message['role'] != 'system' %}\n<|im_start|>system<|im_end|>\n{% endif %}\n"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}\n{{ message['content'] }}<|im_end|>\n"
    "{% else %}\n{% for content in message['content'] %}\n"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}\n"
    "{% set image_count.value = image_count.value + 1 %}\n{% if add_vision_id %}\n"
    "Picture {{ image_count.value }}:\n{% endif -%}\n<|image_pad|>\n{%- elif 'text' in content %}\n"
    "{{ content['text'] }}\n{% endif %}\n{% endfor %}\n<|im_end|>\n{% endif %}\n{% endfor %}\n"
    "{% if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}"
)
"""LightOnOCR-1B-1025's chat_template.jinja, verbatim."""

PROCESSOR_CLASS = "LightOnOCRProcessor"


def build(out: Path) -> None:
    """Write a tiny LightOnOCR model directory into ``out``."""
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN3_PLAIN_TOKENS, chat_template=CHAT_TEMPLATE,
                                extra={"model_max_length": 131072})
    image_processor = PixtralImageProcessor(
        size={"longest_edge": LONGEST_EDGE}, patch_size={"height": PATCH, "width": PATCH}, resample=3,
        **CLIP_NORMALIZE, do_convert_rgb=True, do_normalize=True, do_rescale=True, do_resize=True,
        rescale_factor=1 / 255, do_pad=None,
    )
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH,
                                 spatial_merge_size=MERGE, chat_template=CHAT_TEMPLATE, image_token="<|image_pad|>",
                                 image_break_token="<|vision_pad|>", image_end_token="<|vision_end|>")
    config = Mistral3Config(
        vision_config=PixtralVisionConfig(
            **VISION_SIZES, head_dim=64, image_size=LONGEST_EDGE, patch_size=PATCH, hidden_act="silu",
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ).to_dict(),
        text_config=Qwen3Config(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=8192,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, rms_norm_eps=1e-6,
            eos_token_id=token_id(tokenizer, "<|im_end|>"), tie_word_embeddings=True,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "<|image_pad|>"), spatial_merge_size=MERGE, vision_feature_layer=-1,
        projector_hidden_act="gelu", multimodal_projector_bias=False,
    )
    config.architectures = ["LightOnOCRForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
    for name in ("processor_config.json", "tokenizer_config.json"):  # the checkpoint's processor class name
        path = out / name
        data = json.loads(path.read_text())
        data["processor_class"] = PROCESSOR_CLASS
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
