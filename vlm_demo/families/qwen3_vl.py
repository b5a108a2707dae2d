"""Qwen3-VL (``Qwen/Qwen3-VL-2B-Instruct``): patch 16, merge 2 -> one token per 32x32 px.

The image is resized so each side is a multiple of 32 and its area lies in [min_pixels, max_pixels];
``<|vision_start|><|image_pad|><|vision_end|>`` expands to one ``<|image_pad|>`` per 32x32 cell.

vLLM 0.32 takes ``min_pixels`` / ``max_pixels`` per request and folds them into the image processor's
``size`` (``shortest_edge`` / ``longest_edge``); ``size`` itself is honoured too.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken

from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor

from . import grounding
from .base import Adapter, Control, KnownCount
from .qwen2_5_vl import SIZE_ALIASES, count_rule, geometry, video_geometry
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

# The chat template of Qwen/Qwen3-VL-2B-Instruct (chat_template.json; the same for the Qwen3-VL
# Instruct checkpoints). No default system prompt; content format "openai".
CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided \
with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": \
<args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

#: Qwen3's added tokens after the Qwen2 special ones (ids 151657-151668 in the real vocabulary),
#: all added with ``special: false`` in the checkpoint's tokenizer.
QWEN3_PLAIN_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]

#: The checkpoint's preprocessor_config.json bounds on the resized image area (``size``).
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
#: The checkpoint's video_preprocessor_config.json bounds (frames x area).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 4096, 25165824
PATCH, MERGE = 16, 2
FACTOR = PATCH * MERGE  # pixels per token side


def build(out: Path) -> None:
    """Write a tiny Qwen3-VL model directory into ``out``."""
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 262144})
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_PLAIN_TOKENS])
    half_normal = dict(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    image_processor = Qwen2VLImageProcessor(
        patch_size=PATCH, temporal_patch_size=2, merge_size=MERGE,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}, **half_normal,
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=PATCH, temporal_patch_size=2, merge_size=MERGE,
        size={"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS}, **half_normal,
    )
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                 video_processor=video_processor, chat_template=CHAT_TEMPLATE)
    head_dim = LM_HIDDEN // LM_HEADS
    ids = {name: token_id(tokenizer, tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    config = Qwen3VLConfig(
        text_config=dict(
            hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
            num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS, head_dim=head_dim,
            vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=262144,
            # The real [24, 20, 20] (of head_dim 128) halved: the sections must sum to head_dim / 2.
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_interleaved": True,
                             "mrope_section": [3 * head_dim // 16, 5 * head_dim // 32, 5 * head_dim // 32]},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=2, hidden_size=128, intermediate_size=256, num_heads=2, out_hidden_size=LM_HIDDEN,
            patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3,
            num_position_embeddings=2304, deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh",
        ),
        tie_word_embeddings=True,
        **ids,
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)


ADAPTER = Adapter(
    name="qwen3_vl", title="Qwen3-VL", model_types=("qwen3_vl",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<|vision_start|><|image_pad|><|vision_end|>"}, aliases=SIZE_ALIASES,
    controls=(Control("min_pixels", label="min_pixels (32x32 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, default=65536),
              Control("max_pixels", label="max_pixels (32x32 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=MAX_PIXELS, sizes_cache=True, default=MAX_PIXELS),
              # per video frame only (video_preprocessor_config.json's own bounds)
              Control("videos_kwargs.min_pixels", label="video frames: min_pixels (32x32 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=VIDEO_MAX_PIXELS, default=VIDEO_MIN_PIXELS),
              Control("videos_kwargs.max_pixels", label="video frames: max_pixels (32x32 px per token)",
                      step=FACTOR * FACTOR, min=FACTOR * FACTOR, max=VIDEO_MAX_PIXELS, default=VIDEO_MAX_PIXELS)),
    grounding=grounding.QWEN3_VL, geometry={"image": geometry, "video": video_geometry}, video_sampling="fps",
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, FACTOR)},
    build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 300, "smart_resize(480, 640, factor 32) = 480x640 -> 15x20 cells "
                   "(preprocessor_config.json: patch 16, merge 2, size shortest_edge 65536, longest_edge 16777216)"),
        KnownCount((320, 320), 100, "smart_resize(320, 320, factor 32) = 320x320 -> 10x10 cells (area 102400 "
                   "within the default bounds)"),
        KnownCount((640, 480), 117, "max_pixels 131072 (128x32x32): 416x288 -> 9x13 cells",
                   {"max_pixels": 131072}),
        KnownCount((320, 320), 256, "min_pixels 262144 (256x32x32): 512x512 -> 16x16 cells",
                   {"min_pixels": 262144}),
    )},
)
