"""Tiny Mistral 3 (``Mistral3ForConditionalGeneration`` with transformers' ``PixtralProcessor``), as
``mistralai/Mistral-Small-3.1-24B-Instruct-2503`` in its Hugging Face format; a family with no adapter here.

Its own shape: an image keeps its aspect ratio (scaled down only, to a longest edge of 1540 px), is cut into
14-px patches merged 2x2, so one token per 28x28 px cell, and is written row by row: each row's ``[IMG]`` tokens
end in ``[IMG_BREAK]`` and the last row's in ``[IMG_END]`` instead, all inside the image's one placeholder range
(the template writes one ``[IMG]`` per image). 1280x720 -> 46 x 26 cells: 1196 ``[IMG]``, 25 ``[IMG_BREAK]``,
one ``[IMG_END]``.

Where the values come from:
- processor_config.json: PixtralProcessor, patch_size 14, spatial_merge_size 2, image_token ``[IMG]``,
  image_break_token ``[IMG_BREAK]``, image_end_token ``[IMG_END]``; preprocessor_config.json:
  PixtralImageProcessor(Fast), size {"longest_edge": 1540}, patch_size 14, bicubic (3), CLIP mean/std,
  rescale 1/255, do_convert_rgb / do_normalize / do_rescale / do_resize true (as I know the checkpoint; no network
  here to read it again).
- config.json: model_type ``mistral3``, image_token_index 10, spatial_merge_size 2, vision_feature_layer -1,
  projector gelu without bias; vision ``pixtral`` (image_size 1540, patch_size 14, head_dim 64, rope_theta 10000,
  silu); text ``mistral`` (vocab 131072, rope_theta 1e9, max_position_embeddings 131072, no sliding window).
- The tokenizer's special tokens, ids 0-999 in the real (Tekken) vocabulary: ``<unk> <s> </s> [INST] [/INST]
  [AVAILABLE_TOOLS] [/AVAILABLE_TOOLS] [TOOL_RESULTS] [/TOOL_RESULTS] [TOOL_CALLS] [IMG] <pad> [IMG_BREAK] [IMG_END]
  [PREFIX] [MIDDLE] [SUFFIX] [SYSTEM_PROMPT] [/SYSTEM_PROMPT] [TOOL_CONTENT]``, then ``<SPECIAL_20>`` ..
  ``<SPECIAL_999>`` (the order as listed by stable-diffusion.cpp's Mistral tokenizer; transformers' PixtralProcessor
  tests against this checkpoint's processor give [IMG] 10, [IMG_BREAK] 12, [IMG_END] 13, <s> 1); bos ``<s>`` put in
  front by the tokenizer's post-processor, eos ``</s>``.
- The chat template: verbatim as transformers' ``tests/models/pixtral/test_processing_pixtral.py`` gives it for
  ``hf-internal-testing/Mistral-Small-3.1-24B-Instruct-2503-only-processor``: ``<s>``, a ``[SYSTEM_PROMPT]`` (the
  default one naming today's date, ``strftime_now``, when the conversation has none), ``[INST]`` ... ``[/INST]``
  per user turn with ``[IMG]`` in place of each image part (content format "openai"), answers ending in ``</s>``.

The tiny model keeps that geometry and those tokens at small sizes (hidden 128, head size 64, two layers each);
the tokenizer is byte-level (ids 0-255 are bytes), so ``[IMG]`` is not id 10: config.json's image_token_index is
the tiny tokenizer's ``[IMG]`` id.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import processors
from transformers import Mistral3Config, MistralConfig, PixtralImageProcessor, PixtralProcessor, PixtralVisionConfig

from vlm_demo.tiny_models.common import (
    CLIP_NORMALIZE,
    LM_HEAD_DIM,
    LM_SIZES,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

PATCH, MERGE, LONGEST_EDGE = 14, 2, 1540

#: The chat template of mistralai/Mistral-Small-3.1-24B-Instruct-2503 (HF format), verbatim.
CHAT_TEMPLATE = (
    "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set default_system_message = \"You are Mistral Small 3, a "
    "Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\\nYour knowledge "
    "base was last updated on 2023-10-01. The current date is \" + today + \".\\n\\nWhen you're not sure about some "
    "information, you say that you don't have the information and don't make up anything.\\nIf the user's question "
    "is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do "
    "not try to answer it right away and you rather ask the user to clarify their request (e.g. \\\"What are some "
    "good restaurants around me?\\\" => \\\"Where are you?\\\" or \\\"When is the next flight to Tokyo\\\" => "
    "\\\"Where do you travel from?\\\")\" %}\n\n{{- bos_token }}\n\n{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- if messages[0] is string %}\n        {%- set system_message = messages[0]['content'] %}\n"
    "        {%- set loop_messages = messages[1:] %}\n    {%- else %} \n"
    "        {%- set system_message = messages[0]['content'][0]['text'] %}\n"
    "        {%- set loop_messages = messages[1:] %}\n    {%- endif %}\n{%- else %}\n"
    "    {%- set system_message = default_system_message %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}\n\n"
    "{%- for message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n"
    "            {%- if message['content'] is string %}\n"
    "            {{- '[INST]' + message['content'] + '[/INST]' }}\n            {%- else %}\n"
    "                    {{- '[INST]' }}\n                    {%- for block in message['content'] %}\n"
    "                            {%- if block['type'] == 'text' %}\n"
    "                                    {{- block['text'] }}\n"
    "                            {%- elif block['type'] == 'image' or block['type'] == 'image_url' %}\n"
    "                                    {{- '[IMG]' }}\n                                {%- else %}\n"
    "                                    {{- raise_exception('Only text and image blocks are supported in message "
    "content!') }}\n                                {%- endif %}\n                        {%- endfor %}\n"
    "                    {{- '[/INST]' }}\n                {%- endif %}\n"
    "    {%- elif message['role'] == 'system' %}\n"
    "        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {%- if message['content'] is string %}\n"
    "            {{- message['content'] + eos_token }}\n        {%- else %}\n"
    "            {{- message['content'][0]['text'] + eos_token }}\n        {%- endif %}\n    {%- else %}\n"
    "        {{- raise_exception('Only user, system and assistant roles are supported!') }}\n    {%- endif %}\n"
    "{%- endfor %}"
)

#: The real tokenizer's special tokens, ids 0-999.
SPECIAL_TOKENS = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]", *[f"<SPECIAL_{i}>" for i in range(20, 1000)],
]


def build(out: Path) -> None:
    """Write a tiny Mistral-Small-3.1-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos="<s>", eos="</s>", pad="<pad>", unk="<unk>",
                                chat_template=CHAT_TEMPLATE,
                                extra={"add_bos_token": True, "add_eos_token": False,
                                       "clean_up_tokenization_spaces": False})
    bos = token_id(tokenizer, "<s>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    image_processor = PixtralImageProcessor(
        size={"longest_edge": LONGEST_EDGE}, patch_size={"height": PATCH, "width": PATCH}, resample=3,
        **CLIP_NORMALIZE, do_convert_rgb=True, do_normalize=True, do_rescale=True, do_resize=True,
        rescale_factor=1 / 255,
    )
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH,
                                 spatial_merge_size=MERGE, chat_template=CHAT_TEMPLATE, image_token="[IMG]",
                                 image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")
    config = Mistral3Config(
        vision_config=PixtralVisionConfig(
            **VISION_SIZES, head_dim=64,
            image_size=LONGEST_EDGE, patch_size=PATCH, hidden_act="silu",
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ).to_dict(),
        text_config=MistralConfig(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=131072,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000_000.0}, rms_norm_eps=1e-5,
            bos_token_id=bos, eos_token_id=token_id(tokenizer, "</s>"), tie_word_embeddings=False,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "[IMG]"), spatial_merge_size=MERGE, vision_feature_layer=-1,
        projector_hidden_act="gelu", multimodal_projector_bias=False, tie_word_embeddings=False,
    )
    config.architectures = ["Mistral3ForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
