"""The tiny DeepSeek-OCR-2 (``deepseek-ai/DeepSeek-OCR-2``): DeepSeek-OCR's directory (``deepseek_ocr``: the same
tokenizer, decoder and no chat template) with OCR-2's architecture and encoder.

Where each value comes from: ``architectures: ["DeepseekOCR2ForCausalLM"]`` and ``model_type: deepseek_vl_v2``
(the checkpoint's, as a public deployment script's preflight of its config.json quotes them); ``vision_config
.image_size`` 1024, which vLLM's model reads as the global view's size (``_parse_and_validate_image_input``);
``projector_config.input_dim`` 896 (the Qwen2-0.5B encoder's width that vLLM's ``build_qwen2_decoder_as_encoder``
builds; a public port's notes: "Linear projection from Qwen2 hidden dim (896) to LLM hidden dim (1280)"). Not found:
the rest of the checkpoint's config.json (its ``vision_config`` fields besides the size, its decoder's sizes); the
decoder here is DeepSeek-OCR's at the tiny sizes, and the tokenizer DeepSeek-OCR's (OCR-2's scripts use the same
n-gram whitelist ids 128821, 128822 for ``<td>``, ``</td>``).
"""

from __future__ import annotations

from pathlib import Path

from .deepseek_ocr import write

ARCHITECTURE = "DeepseekOCR2ForCausalLM"
CHAT_TEMPLATE = None
"""The checkpoint has none: vLLM renders with its fallback for the model type (``template_deepseek_ocr.jinja``)."""
VISION_CONFIG = {"image_size": 1024, "model_type": "vision"}
PROJECTOR_INPUT = 896


def build(out: Path) -> None:
    """Write the tiny DeepSeek-OCR-2 directory into ``out``."""
    write(out, ARCHITECTURE, VISION_CONFIG, PROJECTOR_INPUT)
