"""Tiny LLaVA-NeXT (``llava-hf/llava-v1.6-mistral-7b-hf`` layout), a family with no adapter.

It stands for the generic path's tests: everything (placeholder, image token, counts) must come from
vLLM at run time. CLIP ViT-L/14 at 336 px, "anyres" tiling over the checkpoint's grid pinpoints with
an image-newline token per feature row: 640x480 -> 2x2 tiles of 336 px -> 2340 ``<image>`` tokens
(576 base + 36x48 unpadded grid + 36 newlines), as with the real checkpoint.

Sources of the real values: config.json (model_type ``llava_next``, image_token_index 32000,
image_grid_pinpoints, vision_feature_layer -2, select strategy "default", Mistral-7B-Instruct-v0.2 text
model with vocab 32064), preprocessor/processor config (LlavaNextImageProcessor, shortest_edge 336, crop
336, bicubic, CLIP mean/std; patch_size 14, num_additional_image_tokens 1) and chat_template.json (the
``'</s> '`` revision). The real tokenizer (Mistral v0.2 sentencepiece, 32000 pieces) has only five
added tokens: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<image>`` 32000, ``<pad>`` 32001; ``[INST]`` and
``[/INST]`` are plain text in it (control tokens only came with Mistral's v3 tokenizer), and so they
are here. The tiny tokenizer is byte-level (ids 0-255 are bytes) instead of sentencepiece, and like
the real one it puts ``<s>`` in front when ``add_special_tokens`` is true (its chat template does not).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import processors
from transformers import (
    CLIPVisionConfig,
    LlavaNextConfig,
    LlavaNextImageProcessor,
    LlavaNextProcessor,
    MistralConfig,
)

from vlm_demo.tiny_models.common import (
    CLIP_NORMALIZE,
    LM_HEAD_DIM,
    LM_SIZES,
    VISION_HIDDEN,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

#: The checkpoint's chat_template.json (content format "openai": the template emits ``<image>\n``).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\n' + "
    "message['content'][0]['text'] + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'user' %}"
    "{{ '[INST] ' }}{# Render all images first #}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{{' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'][0]['text'] + '</s> '}}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

#: The real tokenizer's added tokens, in id order (0, 1, 2, 32000, 32001 there).
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<image>", "<pad>"]

#: (height, width) tilings the anyres image processor chooses from (config.json and preprocessor).
IMAGE_GRID_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]


def build(out: Path) -> None:
    """Write a tiny LLaVA-NeXT (Mistral) model directory into ``out``."""
    tokenizer = build_tokenizer(
        SPECIAL_TOKENS, bos="<s>", eos="</s>", pad="<pad>", unk="<unk>", chat_template=CHAT_TEMPLATE,
        extra={"extra_special_tokens": {"image_token": "<image>"}, "padding_side": "left",
               "clean_up_tokenization_spaces": False},
    )
    bos = token_id(tokenizer, "<s>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": 336},
        crop_size={"height": 336, "width": 336},
        image_grid_pinpoints=IMAGE_GRID_PINPOINTS,
        do_center_crop=True,
        do_pad=True,
        resample=3,
        **CLIP_NORMALIZE,
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    config = LlavaNextConfig(
        vision_config=CLIPVisionConfig(
            **VISION_SIZES, image_size=336, patch_size=14, projection_dim=VISION_HIDDEN,
        ).to_dict(),
        text_config=MistralConfig(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-5,
            bos_token_id=bos, eos_token_id=token_id(tokenizer, "</s>"), tie_word_embeddings=False,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "<image>"),
        image_grid_pinpoints=IMAGE_GRID_PINPOINTS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        use_image_newline_parameter=True,
        tie_word_embeddings=False,
    )
    config.architectures = ["LlavaNextForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
