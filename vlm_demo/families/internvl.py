"""InternVL2.5 (``OpenGVLab/InternVL2_5-1B-MPO``, remote-code ``internvl_chat``): 448 px tiles, 256 tokens each.

The image is cut into the grid of 448-px tiles whose aspect ratio is closest to the image's (between
min_dynamic_patch and max_dynamic_patch tiles), plus a 448-px thumbnail when there is more than one tile;
``<image>`` expands to ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``.


vLLM ships no config class for ``internvl_chat``; like the real checkpoint, the directory carries a small
configuration module named in ``auto_map`` (loaded with ``trust_remote_code=True``). vLLM builds the
image processor itself from config.json (tile size, min/max tiles, thumbnail), so no processor config
is written. The chat template takes message content as a plain string, so vLLM puts an ``<image>``
placeholder in the text, which its InternVL processor expands to ``<img><IMG_CONTEXT>*256*tiles</img>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from transformers import Qwen2Config

from . import grounding
from .base import Adapter, Control, ItemGeometry, KnownCount
from ..tiny_models.common import (
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
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
SPECIAL_TOKENS = [
    *QWEN2_SPECIAL_TOKENS,
    "<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>",
]

#: Tiny InternViT: head size 64; the real tile geometry (448 px, patch 14, pixel shuffle 0.5 -> 256 tokens).
VISION_CONFIG = {
    "architectures": ["InternVisionModel"],
    "model_type": "intern_vit_6b",
    "num_channels": 3,
    "image_size": 448,
    "patch_size": 14,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
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
        hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
        num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS,
        vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768, rope_theta=1000000.0,
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
        "force_image_size": 448,
        "downsample_ratio": 0.5,
        "ps_version": "v2",
        "template": "internvl2_5",
        "dynamic_image_size": True,
        "use_thumbnail": True,
        "min_dynamic_patch": 1,
        "max_dynamic_patch": 12,
        "pad2square": False,
        "use_backbone_lora": 0,
        "use_llm_lora": 0,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    write_json(out / "config.json", config)
    (out / f"{CONFIG_MODULE}.py").write_text(CONFIG_MODULE_SOURCE)
    tokenizer.save_pretrained(out)

TILE, TOKENS_PER_TILE = 448, 256


def tile_grid(width: int, height: int, min_num: int, max_num: int, tile: int = TILE) -> tuple[int, int]:
    """InternVL's ``find_closest_aspect_ratio``: (columns, rows) of the tile grid for an image."""
    ratios = sorted({(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                     if min_num <= i * j <= max_num}, key=lambda r: r[0] * r[1])
    best, best_diff = (1, 1), float("inf")
    for cols, rows in ratios:
        diff = abs(width / height - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * cols * rows:
            best = (cols, rows)
    return best


def _tiling(image: Image.Image, mm_kwargs: Mapping[str, Any], min_default: int, max_default: int,
            tile: int) -> ItemGeometry:
    cols, rows = tile_grid(*image.size, mm_kwargs.get("min_dynamic_patch", min_default),
                           mm_kwargs.get("max_dynamic_patch", max_default), tile)
    return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), cols * rows != 1)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tile grid, checked against the engine's own patch count (``image_num_patches``)."""
    if image is None or not hf_config.dynamic_image_size:
        return None
    tile = hf_config.force_image_size or hf_config.vision_config.image_size
    found = _tiling(image, mm_kwargs, hf_config.min_dynamic_patch, hf_config.max_dynamic_patch, tile)
    rows, cols = found.grid or (0, 0)
    thumbnail = bool(hf_config.use_thumbnail and rows * cols != 1)
    if rows * cols + thumbnail != int(fields["image_num_patches"]):
        return None  # the engine's own count wins; never show a guess
    return ItemGeometry(found.orig_size, found.processed_size, found.grid, thumbnail)


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """A video's frames: each sampled frame is one tile (resized to it, no tiling, no thumbnail), one group
    of ``num_image_token`` tokens in a square grid (pixel shuffle 0.5 of the 14-px patches)."""
    tile = hf_config.force_image_size or hf_config.vision_config.image_size
    side = round(tile // hf_config.vision_config.patch_size * hf_config.downsample_ratio)
    return ItemGeometry(image.size if image else None, (tile, tile), (side, side), None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule with the checkpoint's defaults (1-12 tiles, thumbnail), if it gives ``count``."""
    found = _tiling(image, mm_kwargs, 1, 12, TILE)
    rows, cols = found.grid or (0, 0)
    return found if (rows * cols + found.thumbnail) * TOKENS_PER_TILE == count else None


ADAPTER = Adapter(
    name="internvl", title="InternVL2.5", model_types=("internvl_chat",), feature_tokens={"image": "<IMG_CONTEXT>"},
    placeholders={"image": "<image>"}, markers={"image": ("<img>", "</img>")},
    controls=(Control("min_dynamic_patch", label="min_dynamic_patch (448 px tiles)", min=1, max=40, default=1),
              Control("max_dynamic_patch", label="max_dynamic_patch (448 px tiles)", min=1, max=40, sizes_cache=True, default=12)),
    grounding=grounding.INTERNVL, geometry={"image": geometry, "video": video_geometry},
    geometry_from_count={"image": geometry_from_count}, build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 3328, "4:3 -> 4x3 tiles of 448 px + thumbnail = 13 x 256 "
                   "(config.json: force_image_size 448, downsample_ratio 0.5, max_dynamic_patch 12)"),
        KnownCount((640, 480), 1792, "max_dynamic_patch 6: 3x2 tiles + thumbnail = 7 x 256",
                   {"max_dynamic_patch": 6}),
    )},
)
