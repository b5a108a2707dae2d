"""The tiny Qwen3-VL (``Qwen/Qwen3-VL-2B-Instruct``): its tokenizer's added tokens, processors (16-px patches,
2x2 merge, the checkpoint's image and video bounds) and chat template, with tiny towers."""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken
from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor

from ..families.qwen3_vl import MAX_PIXELS, MERGE, MIN_PIXELS, PATCH, VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS
from .common import (
    LM_HEAD_DIM,
    LM_HIDDEN,
    LM_SIZES,
    QWEN2_SPECIAL_TOKENS,
    QWEN3_PLAIN_TOKENS,
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
    head_dim = LM_HEAD_DIM
    config = Qwen3VLConfig(
        text_config=dict(
            **LM_SIZES, head_dim=head_dim, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=262144,
            # The real [24, 20, 20] (of head_dim 128) halved: the sections must sum to head_dim / 2.
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_interleaved": True,
                             "mrope_section": [3 * head_dim // 16, 5 * head_dim // 32, 5 * head_dim // 32]},
            eos_token_id=token_id(tokenizer, "<|im_end|>"), bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=VISION_LAYERS, hidden_size=VISION_HIDDEN, intermediate_size=VISION_INTERMEDIATE,
            num_heads=VISION_HEADS, out_hidden_size=LM_HIDDEN,
            patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3,
            num_position_embeddings=2304, deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh",
        ),
        tie_word_embeddings=True,
        **token_ids(tokenizer, QWEN_VL_TOKEN_FIELDS),
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
