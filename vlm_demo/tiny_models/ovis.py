"""The tiny Ovis2 (``AIDC-AI/Ovis2-2B``): config.json (a Qwen2 LLM and an AIMv2 visual tokenizer at the real
448-px, patch-14, stride-2 geometry, tiny widths), its tokenizer and chat template, CLIP's image processor
with center-crop off (Ovis resizes each crop to fit 448 and pads it to a square itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import CLIPImageProcessor, PreTrainedTokenizerFast

from ..families.ovis import HIDDEN_STRIDE, IMAGE_SIZE, PATCH_SIZE
from .common import (
    CLIP_NORMALIZE,
    LM_HIDDEN,
    LM_LAYERS,
    LM_SIZES,
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

# The chat template Ovis2-2B ships in tokenizer_config.json: Qwen2.5-Instruct's (its LLM is
# Qwen2.5-1.5B-Instruct). It renders ``message['content']`` as a string, so vLLM resolves the
# content format "string" and an image part becomes the text "<image>" on its own line.
CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# Qwen2.5's added tokens, in id order (151643-151664 in the real vocabulary). "<image>" is plain
# text in Ovis2, not a token: vLLM's Ovis processor finds it by its text and expands it into
# "<|image_pad|>" ids (the pad token vLLM uses for Qwen2 LLMs).
SPECIAL_TOKENS = [*QWEN2_SPECIAL_TOKENS, *QWEN2_5_ADDED_TOKENS]

#: Ovis2 uses 65536 visual words; a small table keeps the soft-token tensors
#: (crops x 256 x vocab floats) and the embedding table small. Must exceed the 5 indicator ids.
VISUAL_VOCAB_SIZE = 2048


def _llm_config(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """config.json's ``llm_config``: Qwen2.5-1.5B-Instruct's settings at the tiny sizes."""
    return {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        **LM_SIZES,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "max_window_layers": LM_LAYERS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "vocab_size": padded_vocab_size(tokenizer),
        "bos_token_id": token_id(tokenizer, "<|endoftext|>"),
        "eos_token_id": token_id(tokenizer, "<|im_end|>"),
        "torch_dtype": "bfloat16",
    }


#: config.json's ``visual_tokenizer_config``: an AIMv2 backbone at the real geometry, tiny widths.
VISUAL_TOKENIZER_CONFIG = {
    "model_type": "aimv2_visual_tokenizer",
    "backbone_config": {
        "model_type": "aimv2",
        **VISION_SIZES,
        "num_channels": 3,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "rms_norm_eps": 1e-05,
        "attention_dropout": 0.0,
        "qkv_bias": False,
        "mlp_bias": False,
    },
    "backbone_kwargs": {},
    "depths": None,
    "drop_cls_token": False,
    "hidden_stride": HIDDEN_STRIDE,
    "tau": 1.0,
    "tokenize_function": "softmax",
    "vocab_size": VISUAL_VOCAB_SIZE,
}


def build(out: Path) -> None:
    """Write a tiny Ovis2 model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS,
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 32768})
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_center_crop=False, resample=3, **CLIP_NORMALIZE,
    )
    write_json(out / "config.json", {
        "architectures": ["Ovis"],
        "model_type": "ovis",
        "conversation_formatter_class": "QwenConversationFormatter",
        "disable_tie_weight": False,
        "hidden_size": LM_HIDDEN,
        "llm_attn_implementation": "flash_attention_2",
        "llm_config": _llm_config(tokenizer),
        "multimodal_max_length": 32768,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "visual_tokenizer_config": VISUAL_TOKENIZER_CONFIG,
    })
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
