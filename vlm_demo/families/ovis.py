"""Ovis2 (``AIDC-AI/Ovis2-2B``): AIMv2 ViT at 448 px, patch 14, hidden stride 2.

Each 448x448 crop gives (448 / 14 / 2)^2 = 256 visual tokens. An image is split into a grid of
up to ``max_partition`` crops (default 9) and, when the grid has more than one cell, the whole
image goes first as an extra crop. vLLM's own ``OvisProcessor`` expands ``<image>`` into
``<|image_pad|>`` ids: per crop one indicator plus 256 visual tokens, plus the trailing
indicators, so an image with an ``r x c`` grid takes ``259`` tokens when ``r * c == 1`` and
``257 * (r * c + 1) + 1`` otherwise (2571 for a 3x3 grid).

vLLM ships the config (``OvisConfig``) and processor classes for model type ``ovis``, so no
remote code is needed. The image processor is CLIP's, with center-crop off: Ovis resizes each
crop to fit 448 and pads it to a square itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from transformers import CLIPImageProcessor

from .base import Adapter, Control, ItemGeometry, KnownCount
from ..tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
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
SPECIAL_TOKENS = [*QWEN2_SPECIAL_TOKENS, "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                  "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]

#: Geometry of Ovis2-2B's visual tokenizer (aimv2-large-patch14-448); sizes below are tiny.
IMAGE_SIZE = 448
PATCH_SIZE = 14
HIDDEN_STRIDE = 2
#: Ovis2 uses 65536 visual words; a small table keeps the soft-token tensors
#: (crops x 256 x vocab floats) and the embedding table small. Must exceed the 5 indicator ids.
VISUAL_VOCAB_SIZE = 2048


def build(out: Path) -> None:
    """Write a tiny Ovis2 model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS,
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 32768})
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_center_crop=False,
        resample=3,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    llm_config = {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": LM_HIDDEN,
        "intermediate_size": LM_INTERMEDIATE,
        "num_hidden_layers": LM_LAYERS,
        "num_attention_heads": LM_HEADS,
        "num_key_value_heads": LM_KV_HEADS,
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
    visual_tokenizer_config = {
        "model_type": "aimv2_visual_tokenizer",
        "backbone_config": {
            "model_type": "aimv2",
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
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
    write_json(out / "config.json", {
        "architectures": ["Ovis"],
        "model_type": "ovis",
        "conversation_formatter_class": "QwenConversationFormatter",
        "disable_tie_weight": False,
        "hidden_size": LM_HIDDEN,
        "llm_attn_implementation": "flash_attention_2",
        "llm_config": llm_config,
        "multimodal_max_length": 32768,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "visual_tokenizer_config": visual_tokenizer_config,
    })
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The partition grid from the processor's ``grids``; each partition is resized on its own
    (long side <= 448), so there is no one processed size."""
    rows, cols = (int(v) for v in fields["grids"].reshape(-1)[-2:].tolist())
    return ItemGeometry(image.size if image else None, None, (rows, cols), rows * cols > 1)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Ovis's partition rule (fewest partitions covering enough of the image, else the best cover)."""
    side, segment = IMAGE_SIZE, 255  # (448 / 14 / 2)^2 - 1 pad tokens per visual atom
    max_partition, threshold = mm_kwargs.get("max_partition", 9), mm_kwargs.get("covering_threshold", 0.9)
    w, h = image.size

    def cells(rows: int, cols: int) -> list[tuple[int, int]]:  # width, height of each partition
        return [((w if c == cols - 1 else (c + 1) * (w // cols)) - c * (w // cols),
                 (h if r == rows - 1 else (r + 1) * (h // rows)) - r * (h // rows))
                for r in range(rows) for c in range(cols)]

    def covered(cw: int, ch: int) -> float:  # area of one partition kept after resizing to ``side``
        long, short = max(cw, ch), min(cw, ch)
        return side * (short / long * side) if long > side else long * short

    grids = [((rows, cols), sum(covered(*cell) for cell in cells(rows, cols)) / (w * h))
             for rows in range(1, max_partition + 1) for cols in range(1, max_partition + 1)
             if rows * cols <= max_partition]
    good = [g for g in grids if g[1] > threshold]
    (rows, cols), _ = (sorted(good, key=lambda g: (g[0][0] * g[0][1], -g[1])) if good
                       else sorted(grids, key=lambda g: (-g[1], g[0][0] * g[0][1])))[0]
    n = rows * cols  # pads: one per indicator token (start, prefix, separators, end) and ``segment`` per atom
    if (4 + segment if n == 1 else 3 + 2 * n + (1 + n) * segment) != count:
        return None
    return ItemGeometry(image.size, None, (rows, cols), n > 1)


ADAPTER = Adapter(
    name="ovis", title="Ovis2", model_types=("ovis",), feature_tokens={"image": "<|image_pad|>"},
    placeholders={"image": "<image>"},
    ranges_from_ids=False, controls=(Control("max_partition", label="max_partition (448 px partitions)", min=1, max=16, sizes_cache=True, default=9),),
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count}, build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 1286, "max_partition 9: 2x2 partitions + the whole image = 5 atoms x 255 pads + 11 "
                   "indicator pads (Ovis2 preprocess, covering threshold 0.9)"),
        KnownCount((640, 480), 259, "max_partition 1: the whole image only, 255 + 4", {"max_partition": 1}),
    )},
)
