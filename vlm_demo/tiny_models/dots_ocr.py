"""The tiny dots.ocr (``rednote-hilab/dots.ocr``, remote-code ``dots_ocr``): config.json naming its configuration
module (``auto_map``, as the checkpoint's does), Qwen2-VL's image processor with dots' values, the tokenizer's added
tokens in the real ids' order and both of the checkpoint's chat templates, with tiny towers.

Where each value comes from:

- Configuration classes: vLLM 0.32's copy of the checkpoint's ``configuration_dots.py``
  (``vllm/transformers_utils/configs/dotsocr.py``: ``DotsVisionConfig`` ``dots_vit``, ``DotsOCRConfig`` on
  ``Qwen2Config``, ``image_token_id=151665``). vLLM has no config class registered for ``dots_ocr`` (its
  ``_CONFIG_REGISTRY`` lacks it) and ``DotsOCRProcessingInfo`` insists on a class named ``DotsOCRConfig``: the
  checkpoint loads it as remote code (``trust_remote_code``), and so does this directory.
- Vision geometry (config.json's ``vision_config``): patch 14, ``spatial_merge_size`` 2, ``temporal_patch_size`` 1
  (the vision tower takes 3x1x14x14 patches: ``DotsPatchEmbed``); the tower's widths are tiny here.
- Image processor (preprocessor_config.json): ``Qwen2VLImageProcessor``, patch 14, merge 2, temporal patch 1,
  ``min_pixels`` 3136, ``max_pixels`` 11289600 (dots' ``consts.py``), CLIP's mean and std (hipfire's notes of the
  checkpoint's preprocessor, below). vLLM builds ``Qwen2VLProcessor`` from these files itself
  (``DotsOCRProcessingInfo.get_hf_processor``).
- Tokens: Qwen2.5's 22 added tokens (151643-151664), then dots' nine (151665-151673): ``<|imgpad|>``, ``<|img|>``,
  ``<|endofimg|>``, ``<|systemprompt|>``, ``<|endofsystemprompt|>``, ``<|user|>``, ``<|endofuser|>``,
  ``<|assistant|>``, ``<|endofassistant|>`` (ids from vLLM's config default and a third-party port's notes of the
  checkpoint's ``added_tokens_decoder``, hipfire's dots.ocr plan; that the nine are ``special: true`` was not verified).
  ``<|system|>`` / ``<|endofsystem|>``, which the templates write, are no tokens of the checkpoint (plain text).
  generation_config.json's ``eos_token_id`` is ``[151643, 151673]`` (same notes): ``<|endoftext|>`` and
  ``<|endofassistant|>``, the end of an answer under its template.
- Processor: the checkpoint's ``DotsVLProcessor`` (``Qwen2_5_VLProcessor`` with ``<|imgpad|>``, registered for
  ``AutoProcessor`` in ``configuration_dots.py``; its source as third-party copies of that module give it), named in
  preprocessor_config.json (``processor_class``, ``auto_map``: assumed, as scripts load the checkpoint's processor with
  ``AutoProcessor`` alone). It matters for the template: vLLM asks ``AutoProcessor`` for the chat template first, and
  transformers 5.19 builds this one, so vLLM renders with chat_template.json (without the class it takes the
  tokenizer's).
- Chat templates: the tokenizer's (tokenizer_config.json, string content only: ``<|user|>`` + text + ``<|endofuser|>``)
  as hipfire's notes quote it; the processor's (chat_template.json, which vLLM prefers: a list of parts is written with
  a leading space and without the user markers) reconstructed from the fragment a Go port quotes and the prompt it
  renders (`` <|img|><|imgpad|>...<|endofimg|>`` + text + ``<|assistant|>``); the exact file was not found.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken
from transformers import Qwen2VLImageProcessor

from ..families.dots_ocr import MAX_PIXELS, MIN_PIXELS
from .common import (
    CLIP_NORMALIZE,
    LM_HIDDEN,
    LM_SIZES,
    QWEN2_5_ADDED_TOKENS,
    QWEN2_SPECIAL_TOKENS,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_INTERMEDIATE,
    VISION_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

CONFIG_MODULE = "configuration_dots"

#: dots' own tokens after Qwen2.5's (ids 151665-151673 in the checkpoint).
DOTS_TOKENS = ["<|imgpad|>", "<|img|>", "<|endofimg|>", "<|systemprompt|>", "<|endofsystemprompt|>", "<|user|>",
               "<|endofuser|>", "<|assistant|>", "<|endofassistant|>"]

#: tokenizer_config.json's template: string content only.
TOKENIZER_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'system' %}{{- '<|system|>' + m.content + '<|endofsystem|>\\n' }}"
    "{%- elif m.role == 'user' %}{{- '<|user|>' + m.content + '<|endofuser|>' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>' + m.content }}"
    "{%- if not loop.last %}{{- '<|endofassistant|>' }}{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if messages[-1].role != 'assistant' %}{{- '<|assistant|>' }}{%- endif %}"
)

#: chat_template.json's (the processor's, which vLLM takes first): a list of parts goes without the user markers.
PROCESSOR_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'system' %}{{- '<|system|>' + m.content + '<|endofsystem|>\\n' }}"
    "{%- elif m.role == 'user' %}{% if m.content is string %}{{- '<|user|>' + m.content + '<|endofuser|>' }}"
    "{% else %} {% for content in m.content %}{% if content.type == 'image' %}{{ '<|img|><|imgpad|><|endofimg|>' }}"
    "{% elif content.type == 'text' %}{{ content.text }}{% endif %}{% endfor %}{% endif %}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>' + m.content }}"
    "{%- if not loop.last %}{{- '<|endofassistant|>' }}{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if messages[-1].role != 'assistant' %}{{- '<|assistant|>' }}{%- endif %}"
)

# The configuration module written next to config.json (the checkpoint ships one too): vLLM's copy of its classes.
CONFIG_MODULE_SOURCE = '''\
"""Configuration of a tiny dots.ocr test model (DotsVisionTransformer + Qwen2), loaded as remote code."""

from transformers import AutoProcessor, Qwen2_5_VLProcessor, Qwen2Config
from transformers.configuration_utils import PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

_VISION_DEFAULTS = {
    "embed_dim": 1536, "hidden_size": 1536, "intermediate_size": 4224, "num_hidden_layers": 42,
    "num_attention_heads": 12, "num_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
    "temporal_patch_size": 1, "rms_norm_eps": 1e-5, "use_bias": False, "attn_implementation": "flash_attention_2",
    "initializer_range": 0.02, "init_merger_std": 0.02, "is_causal": False, "post_norm": True,
    "gradient_checkpointing": False,
}


class DotsVisionConfig(PretrainedConfig):
    model_type = "dots_vit"

    def __init__(self, **kwargs):
        values = {key: kwargs.pop(key, default) for key, default in _VISION_DEFAULTS.items()}
        super().__init__(**kwargs)
        for key, value in values.items():
            setattr(self, key, value)


class DotsOCRConfig(Qwen2Config):
    model_type = "dots_ocr"

    def __init__(self, image_token_id=151665, video_token_id=151656, vision_config=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.image_token_id = image_token_id
        self.video_token_id = video_token_id
        self.vision_config = DotsVisionConfig(**(vision_config or {}))


class DotsVLProcessor(Qwen2_5_VLProcessor):
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        self.image_token = "<|imgpad|>" if not hasattr(tokenizer, "image_token") else tokenizer.image_token


AutoProcessor.register("dots_ocr", DotsVLProcessor)
CONFIG_MAPPING.register("dots_ocr", DotsOCRConfig)
'''


def build(out: Path) -> None:
    """Write a tiny dots.ocr model directory into ``out``."""
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|endoftext|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS, extra={"model_max_length": 131072})
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in DOTS_TOKENS], special_tokens=True)
    tokenizer.save_pretrained(out)
    config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["chat_template"] = TOKENIZER_TEMPLATE
    write_json(config_path, tokenizer_config)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    write_json(out / "chat_template.json", {"chat_template": PROCESSOR_TEMPLATE})

    image_processor = Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=1, merge_size=2,
                                            min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, **CLIP_NORMALIZE)
    image_processor.save_pretrained(out)
    preprocessor = json.loads((out / "preprocessor_config.json").read_text())
    write_json(out / "preprocessor_config.json", {**preprocessor, "processor_class": "DotsVLProcessor",
                                                   "auto_map": {"AutoProcessor": f"{CONFIG_MODULE}.DotsVLProcessor"}})

    (out / f"{CONFIG_MODULE}.py").write_text(CONFIG_MODULE_SOURCE)
    vocab = padded_vocab_size(tokenizer)
    write_json(out / "config.json", {
        "architectures": ["DotsOCRForCausalLM"], "model_type": "dots_ocr",
        "auto_map": {"AutoConfig": f"{CONFIG_MODULE}.DotsOCRConfig"},
        **LM_SIZES, "vocab_size": vocab, "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": True, "tie_word_embeddings": False,
        "use_sliding_window": False, "torch_dtype": "bfloat16",
        "image_token_id": token_id(tokenizer, "<|imgpad|>"), "video_token_id": token_id(tokenizer, "<|video_pad|>"),
        "bos_token_id": token_id(tokenizer, "<|endoftext|>"), "eos_token_id": token_id(tokenizer, "<|endoftext|>"),
        "vision_config": {
            "embed_dim": VISION_HIDDEN, "hidden_size": LM_HIDDEN, "intermediate_size": VISION_INTERMEDIATE,
            "num_hidden_layers": VISION_LAYERS, "num_attention_heads": VISION_HEADS, "num_channels": 3,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 1, "rms_norm_eps": 1e-5,
            "use_bias": False, "post_norm": True, "is_causal": False, "attn_implementation": "sdpa",
        },
    })
    write_json(out / "generation_config.json", {
        "eos_token_id": [token_id(tokenizer, "<|endoftext|>"), token_id(tokenizer, "<|endofassistant|>")],
        "pad_token_id": token_id(tokenizer, "<|endoftext|>"),
    })
