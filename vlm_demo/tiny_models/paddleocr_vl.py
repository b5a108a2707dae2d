"""The tiny PaddleOCR-VL (``PaddlePaddle/PaddleOCR-VL``): transformers 5.19's own classes (config, image processor and
processor, as the checkpoint loads without remote code: transformers' docs load it with ``AutoProcessor`` alone), the
checkpoint's processor values, chat template and the special tokens it names, with tiny towers.

Where each value comes from:

- Image processor: ``PaddleOCRVLImageProcessor`` with the checkpoint's ``min_pixels`` 147384 and ``max_pixels`` 2822400
  (saved as ``size.shortest_edge`` / ``size.longest_edge``, transformers' form of them), ``resample`` 3 (bicubic),
  mean and std 0.5, patch 14, temporal patch 1, merge 2 (a third-party OpenVINO port of the checkpoint lists these
  preprocessor values; transformers' own defaults differ in the bounds: 384x384, 1536x1536).
- Chat template: the checkpoint's ``chat_template.jinja`` as that port copies it (``<|begin_of_sentence|>``, then
  ``User: `` with the pictures before the text, a newline, ``Assistant: ``), but for one line: it writes a picture as
  an ``image_token`` variable that defaults to ``<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>``, and with
  transformers' tokenizer, which names ``image_token`` (its processor needs the name), the template would get the bare
  placeholder instead; transformers' integration test of the checkpoint renders ``<|IMAGE_START|>`` before the
  placeholders (ids 100273, "User: ", 101305, 100295, ...: ``tests/models/paddleocr_vl/test_modeling_paddleocr_vl.py``),
  so the picture is written as the three tokens here.
- Tokens: ``<unk>`` (0), ``<s>`` (1), ``</s>`` (2, the end of an answer), ``<|begin_of_sentence|>`` (100273),
  ``<|IMAGE_PLACEHOLDER|>`` (100295, the config's ``image_token_id``), ``<|IMAGE_START|>`` (101305) and
  ``<|IMAGE_END|>`` (101306, the config's ``vision_start/end_token_id``), in that order (ids from transformers'
  ``PaddleOCRVLConfig`` defaults and a third-party ONNX port's token table). The rest of ERNIE-4.5's special tokens
  (its reserved and coordinate tokens, ``<|end_of_sentence|>``, the token at ``video_token_id`` 100296) were not found
  and are left out; none of them is in the template or vLLM's processing (``video_token_id`` keeps transformers'
  default, 100296, which vLLM's PaddleOCR-VL never reads: the model takes no video).
- Language model: ERNIE-4.5's M-RoPE with the real ``mrope_section`` [16, 24, 24] of head_dim 128 scaled to the tiny
  head_dim (the sections must sum to head_dim / 2); the real rope theta 500000.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PaddleOCRVLConfig, PaddleOCRVLImageProcessor, PaddleOCRVLProcessor

from ..families.paddleocr_vl import MAX_PIXELS, MIN_PIXELS
from .common import (
    LM_HEAD_DIM,
    LM_HIDDEN,
    LM_SIZES,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)
from .qwen2_5_vl import MROPE_SECTION

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|begin_of_sentence|>", "<|IMAGE_PLACEHOLDER|>", "<|IMAGE_START|>",
                  "<|IMAGE_END|>"]

CHAT_TEMPLATE = """{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not eos_token is defined -%}
    {%- set eos_token = "</s>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ eos_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant: " -}}
{%- endif -%}"""


def build(out: Path) -> None:
    """Write a tiny PaddleOCR-VL model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos="<s>", eos="</s>", pad="<unk>", unk="<unk>",
                                chat_template=CHAT_TEMPLATE,
                                extra={"model_max_length": 131072, "cls_token": "<|begin_of_sentence|>",
                                       "extra_special_tokens": {"image_token": "<|IMAGE_PLACEHOLDER|>"}})
    image_processor = PaddleOCRVLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=14,
                                                temporal_patch_size=1, merge_size=2, resample=3,
                                                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    processor = PaddleOCRVLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    config = PaddleOCRVLConfig(
        text_config=dict(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=131072,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0, "mrope_section": MROPE_SECTION},
            rms_norm_eps=1e-5, use_bias=False, hidden_act="silu", tie_word_embeddings=True,
            pad_token_id=tokenizer.unk_token_id, bos_token_id=token_id(tokenizer, "<s>"),
            eos_token_id=token_id(tokenizer, "</s>"),
        ),
        vision_config=dict(**VISION_SIZES, num_channels=3, image_size=384, patch_size=14, spatial_merge_size=2,
                           hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
        image_token_id=token_id(tokenizer, "<|IMAGE_PLACEHOLDER|>"),
        vision_start_token_id=token_id(tokenizer, "<|IMAGE_START|>"),
        vision_end_token_id=token_id(tokenizer, "<|IMAGE_END|>"),
        tie_word_embeddings=True,
    )
    config.architectures = ["PaddleOCRVLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
