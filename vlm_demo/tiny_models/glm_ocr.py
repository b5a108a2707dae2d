"""The tiny GLM-OCR (``zai-org/GLM-OCR``): its tokenizer's added tokens in the checkpoint's order, its processor
(``Glm46VProcessor`` with the checkpoint's ``size``, 14-px patches, temporal patch 2, merge 2) and chat template, with
tiny towers.

Where the values come from (no network here to read the checkpoint itself):
- config.json: the checkpoint's (quoted whole, FP8-quantised but otherwise the same, in a GLM-OCR quantisation guide
  on GitHub): model_type ``glm_ocr``, image_start/end 59256/59257, video_start/end 59258/59259, image 59280, video
  59281; text ``glm_ocr_text`` (eos [59246, 59253], pad 59246, head_dim 128, mrope_section [16, 24, 24],
  partial_rotary_factor 1.0, rope_theta 10000, max_position_embeddings 131072, num_nextn_predict_layers 1, vocab
  59392, no tied embeddings); vision ``glm_ocr_vision`` (image_size 336, patch 14, merge 2, temporal 2, silu,
  rms_norm_eps 1e-5, attention_bias). transformers 5.19's ``GlmOcrConfig`` defaults name the same token ids.
- preprocessor_config.json: see ``vlm_demo.families.glm_ocr`` (``Glm46VImageProcessor``, ``Glm46VProcessor``).
- the added tokens, ids 59246-59281: 59246 ``<|endoftext|>`` (pad, eos), 59253 ``<|user|>`` (the second eos),
  59256-59259 the image and video markers, 59280 ``<|image|>`` and 59281 ``<|video|>`` are the config's. In between,
  the order is GLM-4.5V's tokenizer's (its added tokens from ``<|endoftext|>`` 151329 to ``<|video|>`` 151364, the
  same 36 tokens at the same offsets: 59280 - 59246 = 151363 - 151329); GLM-OCR's own tokenizer_config.json was not
  found in the indexed copies, so those 20 (59260-59279: audio, transcription and code markers, ``<think>``, tool
  and argument tags, ``/nothink``, box markers) and their ``special`` flags (all special here) are GLM-4.5V's, not
  read from the checkpoint. No bos token: the template writes ``[gMASK]<sop>`` itself.
- the chat template: GLM-OCR's as copied whole into llamadart's chat-template tests (``_actualGlmOcrTemplate``): the
  GLM-4.6V form (``[gMASK]<sop>``, ``<|user|>\\n``, an image part as ``<|begin_of_image|><|image|><|end_of_image|>``,
  tools, ``<think></think>`` for answers, ``<|assistant|>\\n``). Content format "openai".
- generation_config.json: eos [59246, 59253], pad 59246 (quoted in a GLM-OCR integration guide on GitHub).
"""

from __future__ import annotations

from pathlib import Path

from transformers import GlmOcrConfig
from transformers.models.glm46v import Glm46VImageProcessor, Glm46VProcessor, Glm46VVideoProcessor

from ..families.glm_ocr import LONGEST_EDGE, MERGE, PATCH, SHORTEST_EDGE, TEMPORAL
from .common import (
    CLIP_NORMALIZE,
    LM_HEAD_DIM,
    LM_HIDDEN,
    LM_SIZES,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_INTERMEDIATE,
    VISION_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

#: The checkpoint's added tokens, ids 59246-59281 in this order (see the module docstring for which are read from
#: the checkpoint's config and which follow GLM-4.5V's tokenizer).
ADDED_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
]

#: The config's token fields.
TOKEN_FIELDS = {
    "image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>", "video_end_token_id": "<|end_of_video|>",
    "image_token_id": "<|image|>", "video_token_id": "<|video|>",
}

CHAT_TEMPLATE = """[gMASK]<sop>
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
<arg_key>{arg-key-2}</arg_key>
<arg_value>{arg-value-2}</arg_value>
...
</tool_call>{%- endif -%}
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content }}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text }}
            {%- elif item is mapping and (item.type == 'image' or 'image' in item) -%}
                <|begin_of_image|><|image|><|end_of_image|>
            {%- elif item is mapping and (item.type == 'video' or 'video' in item) -%}
                <|begin_of_video|><|video|><|end_of_video|>
            {%- elif item is string -%}
                {{- item }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {% set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{% for m in messages %}
{%- if m.role == 'user' -%}<|user|>
{% if m.content is string %}
{{ m.content }}
{%- else %}
{%- for item in m.content %}
{% if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>{% elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>{% elif item.type == 'text' %}
{{ item.text }}
{%- endif %}
{%- endfor %}
{%- endif %}
{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not visible_text(m.content).endswith("/nothink")) else '' -}}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set reasoning_content = '' %}
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- else %}
    {%- if '</think>' in content %}
        {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
{%- endif %}
{%- if loop.index0 > ns.last_user_index and reasoning_content -%}
{{ '\\n<think>' + reasoning_content.strip() +  '</think>'}}
{%- else -%}
{{ '\\n<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ '\\n' + content.strip() }}
{%- endif -%}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{ '\\n<tool_call>' + tc.name }}
{% set _args = tc.arguments %}
{% for k, v in _args.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' -%}
{%- if m.content is string -%}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
    {{- '<|observation|>' }}
{%- endif %}
{{- '\\n<tool_response>\\n' }}
{{- m.content }}
{{- '\\n</tool_response>' }}
{% elif m.content is iterable and m.content is not mapping %}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
{{- '<|observation|>' }}
{%- endif %}
{{- '\\n<tool_response>\\n' }}
{%- for tr in m.content -%}
  {%- if tr is mapping and tr.type is defined -%}
    {%- set t = tr.type | lower -%}
    {%- if t == 'text' and tr.text is defined -%}
{{ tr.text }}
    {%- elif t in ['image', 'image_url'] -%}
<|begin_of_image|><|image|><|end_of_image|>
    {%- elif t in ['video', 'video_url'] -%}
<|begin_of_video|><|video|><|end_of_video|>
    {%- else -%}
{{ tr | tojson(ensure_ascii=False) }}
    {%- endif -%}
  {%- else -%}
{{ tr.output if tr.output is defined else tr }}
  {%- endif -%}
{%- endfor -%}
{{- '\\n</tool_response>' }}
{%- else -%}
<|observation|>{% for tr in m.content %}

<tool_response>
{{ tr.output if tr.output is defined else tr }}
</tool_response>{% endfor -%}
{% endif -%}
{%- elif m.role == 'system' -%}
<|system|>
{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{{'<think></think>\\n' if (enable_thinking is defined and not enable_thinking) else ''}}
{%- endif -%}"""
"""GLM-OCR's chat template (see the module docstring)."""


def build(out: Path) -> None:
    """Write a tiny GLM-OCR model directory into ``out``."""
    tokenizer = build_tokenizer(ADDED_TOKENS, bos=None, eos="<|endoftext|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 131072})
    geometry = dict(patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE, **CLIP_NORMALIZE)
    image_processor = Glm46VImageProcessor(size={"shortest_edge": SHORTEST_EDGE, "longest_edge": LONGEST_EDGE},
                                           do_rescale=True, **geometry)
    processor = Glm46VProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                video_processor=Glm46VVideoProcessor(**geometry), chat_template=CHAT_TEMPLATE)
    eos = [token_id(tokenizer, "<|endoftext|>"), token_id(tokenizer, "<|user|>")]
    pad = token_id(tokenizer, "<|endoftext|>")
    config = GlmOcrConfig(
        text_config=dict(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=131072,
            rms_norm_eps=1e-5, attention_bias=False, hidden_act="silu", num_nextn_predict_layers=1,
            # the real [16, 24, 24] (of head_dim 128) scaled to the tiny head_dim (they sum to head_dim / 2)
            rope_parameters={"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 1.0,
                             "mrope_section": [LM_HEAD_DIM // 8, 3 * LM_HEAD_DIM // 16, 3 * LM_HEAD_DIM // 16]},
            eos_token_id=eos, pad_token_id=pad, tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=VISION_LAYERS, hidden_size=VISION_HIDDEN, intermediate_size=VISION_INTERMEDIATE,
            num_heads=VISION_HEADS, out_hidden_size=LM_HIDDEN, image_size=336, patch_size=PATCH,
            spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, in_channels=3, hidden_act="silu",
            rms_norm_eps=1e-5, attention_bias=True,
        ),
        tie_word_embeddings=False,
        **{field: token_id(tokenizer, token) for field, token in TOKEN_FIELDS.items()},
    )
    config.architectures = ["GlmOcrForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
    write_json(out / "generation_config.json", {"do_sample": False, "eos_token_id": eos, "pad_token_id": pad})
