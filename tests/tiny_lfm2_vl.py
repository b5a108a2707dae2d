"""Tiny LFM2-VL (``Lfm2VlForConditionalGeneration``, model_type ``lfm2_vl``), as ``LiquidAI/LFM2-VL-450M``.

A family with no adapter here, of its own shape: a hybrid language model (LFM2: short convolution layers with
full attention layers, which vLLM 0.32 runs as a hybrid, like Mamba models) and tiled images. An image larger
than ``max_image_tokens`` (256) x 16 x 16 px x 2 x 2 (times ``max_pixels_tolerance`` 2.0) is cut into a grid of
512-px tiles (2 to 10 tiles, the grid closest to its aspect ratio), each tile 512/16 = 32x32 patches pooled 2x2
to 256 tokens, plus a thumbnail of the whole image; a smaller one is resized (to a multiple of 32 px, at least
``min_image_tokens`` 64 tokens) and stands alone. ``<image>`` becomes ``<|image_start|>``, then per tile
``<|img_row_R_col_C|>`` + its ``<image>`` tokens, then ``<|img_thumbnail|>`` + the thumbnail's, then
``<|image_end|>`` (one image alone: ``<|image_start|>`` + its tokens + ``<|image_end|>``).

Where the values come from (LiquidAI/LFM2-VL-450M as copied into the public repository
varun00391/local-finetuned-model, folder ``LiquidAI:LFM2-VL-450M/lfm2-450m``, a transformers 4.55 snapshot):
- processor_config.json / config.json: do_image_splitting true, downsample_factor 2, encoder_patch_size 16,
  min_image_tokens 64, max_image_tokens 256, min_tiles 2, max_tiles 10, max_pixels_tolerance 2.0,
  max_num_patches 1024, tile_size 512, use_image_special_tokens true; image mean/std 0.5, resample 2
  (bilinear), rescale 1/255. That snapshot says ``use_thumbnail: false``; transformers 5.19's
  ``Lfm2VlImageProcessor`` (ported by Liquid AI for the checkpoint's transformers-native revision, the one with
  model_type ``lfm2_vl`` that vLLM 0.32 loads) defaults to true, and vLLM 0.32's LFM2-VL processor always
  counts a thumbnail for a tiled image, so the native revision's value, true, is used here.
- config.json: image_token_index 396, projector gelu / bias / hidden 2560, vision tower
  ``siglip2_vision_model`` (patch 16, num_patches 256, gelu_pytorch_tanh, no head), text model ``lfm2``
  (conv_L_cache 3, block_multiple_of 256, block_auto_adjust_ff_dim, layer_types of conv and full_attention,
  rope_theta 1e6, vocab 65536, max_position_embeddings 128000).
- tokenizer_config.json: the added tokens in id order: <|pad|> 0, <|startoftext|> 1, <|endoftext|> 2, fim 3-5,
  <|im_start|> 6, <|im_end|> 7, tool tokens 8-13, <|reserved_6|>..<|reserved_385|> 16-395, <image> 396,
  <|img_row_1_col_1|>..<|img_row_10_col_10|> 397-496, <|img_thumbnail|> 497, <|image_start|> 498,
  <|image_end|> 499, <|image_split|> 500, <|cot_start|>..<|file_end|> 64394-64399 (all special), and the plain
  added "Mathias" 64011 and "python" 64014; bos <|startoftext|> (added in front by its post-processor),
  eos <|im_end|>, pad <|pad|>; extra special tokens image_token / image_start_token / image_end_token /
  image_thumbnail.
- chat_template.jinja (verbatim below): ``{{bos_token}}``, ChatML turns, each image part as ``<image>`` in
  place (content format "openai").

The tiny model keeps all of that except sizes: hidden 128 with head size 64, two layers (one convolution, one
attention, so it is still a hybrid), a two-layer SigLIP2 of width 128. The tokenizer is byte-level with no
merges (ids 0-255 are bytes), so its ids differ from the real ones; config.json's image_token_id is the tiny
tokenizer's ``<image>`` id.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import processors
from transformers import Lfm2VlConfig, Lfm2VlImageProcessor, Lfm2VlProcessor

from vlm_demo.tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_SIZES,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

#: LiquidAI/LFM2-VL-450M's chat_template.jinja, verbatim.
CHAT_TEMPLATE = (
    "{{bos_token}}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<image>' }}{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}"
)

IMAGE_TOKEN, IMAGE_START, IMAGE_END, THUMBNAIL = "<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"

#: The real tokenizer's special added tokens, in id order (ids 14 and 15 are not among them).
SPECIAL_TOKENS = [
    "<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>", "<|im_start|>",
    "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>",
    "<|tool_response_start|>", "<|tool_response_end|>",
    *[f"<|reserved_{i}|>" for i in range(6, 386)],
    IMAGE_TOKEN,
    *[f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)],
    THUMBNAIL, IMAGE_START, IMAGE_END, "<|image_split|>",
    "<|cot_start|>", "<|cot_end|>", "<|review_start|>", "<|review_end|>", "<|file_start|>", "<|file_end|>",
]
#: Its two plain (not special) added tokens.
PLAIN_TOKENS = ["Mathias", "python"]

#: The checkpoint's image processor settings (processor_config.json; use_thumbnail: see the module docstring).
IMAGE_PROCESSOR = dict(
    do_image_splitting=True, downsample_factor=2, encoder_patch_size=16, min_image_tokens=64, max_image_tokens=256,
    min_tiles=2, max_tiles=10, max_pixels_tolerance=2.0, tile_size=512, use_thumbnail=True, max_num_patches=1024,
    image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], resample=2, rescale_factor=1 / 255,
)


def build(out: Path) -> None:
    """Write a tiny LFM2-VL-450M-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(
        SPECIAL_TOKENS, bos="<|startoftext|>", eos="<|im_end|>", pad="<|pad|>", chat_template=CHAT_TEMPLATE,
        added_tokens=PLAIN_TOKENS,
        extra={"extra_special_tokens": {"image_token": IMAGE_TOKEN, "image_start_token": IMAGE_START,
                                        "image_end_token": IMAGE_END, "image_thumbnail": THUMBNAIL},
               "add_bos_token": True, "add_eos_token": False, "spaces_between_special_tokens": False,
               "clean_up_tokenization_spaces": True},
    )
    bos = token_id(tokenizer, "<|startoftext|>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A", pair="<|startoftext|> $A <|startoftext|> $B",
        special_tokens=[("<|startoftext|>", bos)])
    processor = Lfm2VlProcessor(image_processor=Lfm2VlImageProcessor(**IMAGE_PROCESSOR), tokenizer=tokenizer,
                                chat_template=CHAT_TEMPLATE)
    config = Lfm2VlConfig(
        text_config=dict(
            model_type="lfm2", **LM_SIZES, layer_types=["conv", "full_attention"],
            conv_L_cache=3, conv_bias=False, block_multiple_of=256, block_ffn_dim_multiplier=1.0,
            block_auto_adjust_ff_dim=True, norm_eps=1e-5, max_position_embeddings=128000,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            vocab_size=padded_vocab_size(tokenizer), bos_token_id=bos, eos_token_id=token_id(tokenizer, "<|im_end|>"),
            pad_token_id=token_id(tokenizer, "<|pad|>"), tie_word_embeddings=True,
            # the real text config's own LFM2 keys (vLLM 0.32's LFM2 reads conv_dim; not Lfm2Config fields)
            block_dim=LM_HIDDEN, block_ff_dim=256, block_mlp_init_scale=1.0, block_norm_eps=1e-5,
            block_out_init_scale=1.0, block_use_swiglu=True, block_use_xavier_init=True, conv_dim=LM_HIDDEN,
            conv_dim_out=LM_HIDDEN, conv_use_xavier_init=True, num_heads=LM_HEADS, use_pos_enc=True,
        ),
        vision_config=dict(
            model_type="siglip2_vision_model", **VISION_SIZES, num_channels=3, num_patches=256, patch_size=16,
            hidden_act="gelu_pytorch_tanh",
            layer_norm_eps=1e-6, vision_use_head=False,
        ),
        image_token_id=token_id(tokenizer, IMAGE_TOKEN), projector_hidden_act="gelu", projector_hidden_size=256,
        projector_bias=True, downsample_factor=2, vision_feature_layer=-1,
    )
    config.architectures = ["Lfm2VlForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
