"""The tiny DeepSeek-OCR (``deepseek-ai/DeepSeek-OCR``): config.json as the checkpoint's (vLLM's
``DeepseekVLV2Config`` reads it), a tiny DeepSeek-V2 decoder, DeepSeek-V3's tokenizer token set with OCR's own
tokens, and no chat template (as the checkpoint: vLLM falls back to ``template_deepseek_ocr.jinja``).

Where each value comes from:

- config.json: the checkpoint's (a copy of ``deepseek-ai/DeepSeek-OCR/config.json`` quoted in a public model
  report): ``architectures: ["DeepseekOCRForCausalLM"]``, ``model_type: deepseek_vl_v2``, ``candidate_resolutions
  [[1024, 1024]]``, ``global_view_pos: head``, ``tile_tag: 2D``, ``vision_config`` (``image_size 1024``,
  ``model_name deeplip_b_l``, the SAM ViT-B and CLIP-L widths), ``projector_config`` (``linear``, ``input_dim
  2048``; ``n_embed`` is the tiny decoder's width, 1280 in the checkpoint), ``language_config`` (DeepSeek-V2 MoE
  without MLA: ``first_k_dense_replace 1``, ``n_shared_experts 2``, ``topk_method greedy``, ``use_mla false``,
  ``max_position_embeddings 8192``, ``vocab_size 129280``; the widths, layers and expert counts are tiny here).
  The checkpoint's ``auto_map`` (its remote-code ``modeling_deepseekocr.py``) is left out: vLLM reads the config
  with its own class and never loads that code. vLLM builds the SAM and CLIP towers at fixed sizes whatever the
  config says (``build_sam_vit_b``, a 24-layer CLIP-L), so only the decoder is tiny: on a 2-core CPU its engine
  started in 27 s and answered 8 tokens on a 640x480 page in 21 s, on an A4 page (903 tokens, 7 views) in 66 s.
- Processor: none on disk; vLLM builds ``DeepseekOCRProcessor`` itself from its module constants (the family
  module's ``BASE_SIZE``, ``IMAGE_SIZE``; mean and std 0.5).
- Tokenizer: DeepSeek-V3's added tokens in their order (ids 0-2 ``<｜begin▁of▁sentence｜>``,
  ``<｜end▁of▁sentence｜>``, ``<｜▁pad▁｜>``; 128000-128799 ``<｜place▁holder▁no▁N｜>``; 128800-128814 FIM, chat
  and tool markers), then OCR's ten (128815-128824: ``<image>``, ``<|ref|>``, ``<|/ref|>``, ``<|det|>``,
  ``<|/det|>``, ``<|grounding|>``, ``<td>``, ``</td>``, ``<tr>``, ``</tr>``): the list in the official
  ``DeepSeek-OCR-vllm/process/image_process.py`` (commented out there: the checkpoint's tokenizer already holds
  them), which puts ``<image>`` at 128815 right after V3's last token 128814 and ``<td>``, ``</td>`` at 128821,
  128822 (the README's n-gram whitelist). V3's table: ``deepseek_v3`` in a public tokenizer port (818 added
  tokens). Not found: whether the checkpoint also holds DeepSeek-VL2's ``<|User|>`` / ``<|Assistant|>`` (the
  same file's commented "special tokens for SFT data"; an mllm port of DeepSeek-OCR lists them), so they are
  left out. Here the ids are 256 byte tokens, then these in the same order, all special (DeepSeek-OCR's processor
  code adds its ten as ``additional_special_tokens``, and the recipe's ``skip_special_tokens=False`` keeps ``<td>``
  in answers; each token's own ``special`` flag in the checkpoint was not seen).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerFast

from .common import (LM_HEADS, LM_HIDDEN, LM_INTERMEDIATE, LM_LAYERS, build_tokenizer, padded_vocab_size, token_id,
                     write_json)

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"

#: DeepSeek-V3's named added tokens (ids 128800-128814), after its 800 placeholders (128000-128799).
V3_NAMED_TOKENS = [
    "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
    "<｜tool▁sep｜>",
]

#: DeepSeek-OCR's own tokens (ids 128815-128824).
OCR_TOKENS = [
    "<image>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>", "<td>", "</td>", "<tr>", "</tr>",
]

V3_TOKENS = [BOS, EOS, PAD, *(f"<｜place▁holder▁no▁{n}｜>" for n in range(800)), *V3_NAMED_TOKENS]
"""DeepSeek-V3's added tokens in id order."""

CHAT_TEMPLATE = None
"""The checkpoint has none: vLLM renders with its fallback for the model type (``template_deepseek_ocr.jinja``)."""

ARCHITECTURE = "DeepseekOCRForCausalLM"

#: config.json's ``vision_config``, as the checkpoint's (vLLM builds the towers at these sizes whatever it says).
VISION_CONFIG: dict[str, Any] = {
    "image_size": 1024, "mlp_ratio": 3.7362, "model_name": "deeplip_b_l", "model_type": "vision",
    "width": {
        "clip-l-14-224": {"heads": 16, "image_size": 224, "layers": 24, "patch_size": 14, "width": 1024},
        "sam_vit_b": {"downsample_channels": [512, 1024], "global_attn_indexes": [2, 5, 8, 11], "heads": 12,
                      "layers": 12, "width": 768},
    },
}
PROJECTOR_INPUT = 2048
"""``projector_config.input_dim``: CLIP-L's 1024 features beside SAM's 1024."""


def language_config(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """``language_config``: the checkpoint's DeepSeek-V2 MoE decoder (no MLA) at the tiny sizes."""
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "bos_token_id": token_id(tokenizer, BOS), "eos_token_id": token_id(tokenizer, EOS),
        "first_k_dense_replace": 1, "hidden_size": LM_HIDDEN, "intermediate_size": LM_INTERMEDIATE,
        "kv_lora_rank": None, "lm_head": True, "max_position_embeddings": 8192, "moe_intermediate_size": 64,
        "n_group": 1, "n_routed_experts": 4, "n_shared_experts": 2, "num_attention_heads": LM_HEADS,
        "num_experts_per_tok": 2, "num_hidden_layers": LM_LAYERS, "num_key_value_heads": LM_HEADS,
        "q_lora_rank": None, "qk_nope_head_dim": 0, "qk_rope_head_dim": 0, "rm_head": False, "topk_group": 1,
        "topk_method": "greedy", "torch_dtype": "bfloat16", "use_mla": False, "v_head_dim": 0,
        "vocab_size": padded_vocab_size(tokenizer),
    }


def tokenizer() -> PreTrainedTokenizerFast:
    """DeepSeek-V3's added tokens, then OCR's, after the 256 byte tokens; no chat template."""
    return build_tokenizer([*V3_TOKENS, *OCR_TOKENS], bos=BOS, eos=EOS, pad=PAD,
                           extra={"model_max_length": 8192, "add_bos_token": True, "add_eos_token": False})


def write(out: Path, architecture: str, vision: dict[str, Any], projector_input: int) -> None:
    """Write a tiny DeepSeek-OCR-shaped directory (config.json and tokenizer files) into ``out``."""
    tok = tokenizer()
    language = language_config(tok)
    write_json(out / "config.json", {
        "architectures": [architecture],
        "candidate_resolutions": [[1024, 1024]],
        "global_view_pos": "head",
        "language_config": language,
        "model_type": "deepseek_vl_v2",
        "projector_config": {"input_dim": projector_input, "model_type": "mlp_projector", "n_embed": LM_HIDDEN,
                             "projector_type": "linear"},
        "tile_tag": "2D",
        "torch_dtype": "bfloat16",
        "vision_config": vision,
        **{k: language[k] for k in ("bos_token_id", "eos_token_id", "vocab_size")},
    })
    tok.save_pretrained(out)


def build(out: Path) -> None:
    """Write the tiny DeepSeek-OCR directory into ``out``."""
    write(out, ARCHITECTURE, VISION_CONFIG, PROJECTOR_INPUT)
