"""The tiny InternVL2.5 (``OpenGVLab/InternVL2_5-1B-MPO``, remote-code ``internvl_chat``): config.json with the
checkpoint's tiling settings, its configuration module (named in ``auto_map``), tokenizer and chat template.

vLLM ships no config class for ``internvl_chat`` and builds the image processor itself from config.json, so the
directory carries a small configuration module, as the real checkpoint does, and no processor config.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen2Config

from ..families.internvl import MAX_TILES, MIN_TILES, TILE
from .common import (
    INTERNVL_TOKENS,
    LM_SIZES,
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

CONFIG_MODULE = "configuration_internvl_chat"

# The configuration module written next to config.json (the real checkpoint ships one too).
CONFIG_MODULE_SOURCE = '''\
"""Configuration of a tiny InternVL-Chat test model (InternViT + Qwen2), loaded as remote code."""

from transformers import AutoConfig, PretrainedConfig

_VISION_DEFAULTS = {
    "num_channels": 3, "image_size": 448, "patch_size": 14, "hidden_size": 1024,
    "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24,
    "hidden_act": "gelu", "norm_type": "layer_norm", "layer_norm_eps": 1e-6, "qkv_bias": True,
    "qk_normalization": False, "use_flash_attn": False, "dropout": 0.0, "attention_dropout": 0.0,
    "drop_path_rate": 0.0, "initializer_range": 0.02, "initializer_factor": 1.0,
}

_CHAT_DEFAULTS = {
    "select_layer": -1, "force_image_size": 448, "downsample_ratio": 0.5, "ps_version": "v2",
    "template": "internvl2_5", "dynamic_image_size": True, "use_thumbnail": True,
    "min_dynamic_patch": 1, "max_dynamic_patch": 12, "pad2square": False,
    "use_backbone_lora": 0, "use_llm_lora": 0,
}


class InternVisionConfig(PretrainedConfig):
    model_type = "intern_vit_6b"

    def __init__(self, **kwargs):
        values = {key: kwargs.pop(key, default) for key, default in _VISION_DEFAULTS.items()}
        super().__init__(**kwargs)
        for key, value in values.items():
            setattr(self, key, value)


class InternVLChatConfig(PretrainedConfig):
    model_type = "internvl_chat"
    sub_configs = {"vision_config": InternVisionConfig, "llm_config": AutoConfig}

    def __init__(self, vision_config=None, llm_config=None, **kwargs):
        values = {key: kwargs.pop(key, default) for key, default in _CHAT_DEFAULTS.items()}
        super().__init__(**kwargs)
        if not isinstance(vision_config, PretrainedConfig):
            vision_config = InternVisionConfig(**(vision_config or {}))
        if not isinstance(llm_config, PretrainedConfig):
            llm_config = dict(llm_config or {"architectures": ["Qwen2ForCausalLM"]})
            llm_config = AutoConfig.for_model(llm_config.pop("model_type", "qwen2"), **llm_config)
        self.vision_config = vision_config
        self.llm_config = llm_config
        for key, value in values.items():
            setattr(self, key, value)
'''

# The real InternVL2.5 default system prompt ("You are InternVL, developed by Shanghai AI Lab, ...").
SYSTEM_PROMPT = (
    "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。"
)

# The chat template of OpenGVLab/InternVL2_5-1B-MPO (content format "string": images arrive as
# "<image>" placeholders inside the message text).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: The real tokenizer's added tokens: Qwen2.5's 22 (14 special, then 8 plain; ``<|video_pad|>`` among
#: them, which makes vLLM 0.32 build a video processor: see ``engine/workarounds.py``), then InternVL's
#: 9 (special; ids 151665-151673 in the real vocabulary).
SPECIAL_TOKENS = [*QWEN2_SPECIAL_TOKENS, *INTERNVL_TOKENS]

#: Tiny InternViT: head size 64; the real tile geometry (448 px, patch 14, pixel shuffle 0.5 -> 256 tokens).
VISION_CONFIG = {
    "architectures": ["InternVisionModel"],
    "model_type": "intern_vit_6b",
    "num_channels": 3,
    "image_size": TILE,
    "patch_size": 14,
    **VISION_SIZES,
    "hidden_act": "gelu",
    "norm_type": "layer_norm",
    "layer_norm_eps": 1e-6,
    "qkv_bias": True,
    "qk_normalization": False,
    "use_flash_attn": False,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "drop_path_rate": 0.0,
    "initializer_range": 0.02,
    "initializer_factor": 1.0,
    "dtype": "bfloat16",
}


def build(out: Path) -> None:
    """Write a tiny InternVL2.5-1B-MPO-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS,
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 8192})
    llm_config = Qwen2Config(
        **LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, use_sliding_window=False, tie_word_embeddings=False,
        bos_token_id=token_id(tokenizer, "<|endoftext|>"), eos_token_id=token_id(tokenizer, "<|im_end|>"),
        pad_token_id=token_id(tokenizer, "<|endoftext|>"), architectures=["Qwen2ForCausalLM"],
        dtype="bfloat16",
    ).to_dict()
    llm_config.pop("transformers_version", None)
    config = {
        "architectures": ["InternVLChatModel"],
        "auto_map": {"AutoConfig": f"{CONFIG_MODULE}.InternVLChatConfig"},
        "model_type": "internvl_chat",
        "vision_config": VISION_CONFIG,
        "llm_config": llm_config,
        "select_layer": -1,
        "force_image_size": TILE,
        "downsample_ratio": 0.5,
        "ps_version": "v2",
        "template": "internvl2_5",
        "dynamic_image_size": True,
        "use_thumbnail": True,
        "min_dynamic_patch": MIN_TILES,
        "max_dynamic_patch": MAX_TILES,
        "pad2square": False,
        "use_backbone_lora": 0,
        "use_llm_lora": 0,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    write_json(out / "config.json", config)
    (out / f"{CONFIG_MODULE}.py").write_text(CONFIG_MODULE_SOURCE)
    tokenizer.save_pretrained(out)
