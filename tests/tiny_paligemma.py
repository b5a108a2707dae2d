"""Tiny PaliGemma (``PaliGemmaForConditionalGeneration``, model_type ``paligemma``), as
``google/paligemma-3b-mix-224``; a family with no adapter here.

Its own shape: no chat template at all (vLLM 0.32 falls back to its ``template_basic.jinja`` for paligemma: the
messages' text, nothing else), no placeholder text (the model's ``get_placeholder_str`` is None): vLLM inserts
each image's 256 ``<image>`` tokens and a ``<bos>`` at the start of the prompt and ends the prompt with ``\\n``,
the PaliGemma prompt format ``<image>*256 <bos> prompt \\n``. One image a prompt (vLLM's limit for it). SigLIP
So400m/14 at 224 px: 16x16 patches, 256 tokens for any picture (squashed to 224x224).

Where the values come from (the checkpoint as I know it; no network here to read it again):
- config.json: image_token_index 257152, projection_dim 2048, vision ``siglip_vision_model`` (224 px, patch 14,
  num_image_tokens 256, no head, gelu_pytorch_tanh), text ``gemma`` (Gemma 1 2B: head_dim 256, one KV head,
  vocab 257216 = 256000 + 1024 <locNNNN> + 128 <segNNN> + <image>, padded), bos 2, eos 1, pad 0.
- preprocessor_config.json: SiglipImageProcessor, size 224x224, bicubic (3), mean/std 0.5, rescale 1/255,
  image_seq_length 256; processor PaliGemmaProcessor.
- The tokenizer (Gemma 1's, as transformers' PaliGemmaProcessor extends it): the special ``<pad> <eos> <bos> <unk>
  <mask>`` (ids 0-4); Gemma's user-defined pieces ``<2mass> [@BOS@] <unused0>``..``<unused98>`` ``<start_of_turn>
  <end_of_turn>``, the newline runs 1-31 (vLLM's PaliGemma processor looks up ``"\\n"``), "▁" runs 2-31 and 48
  HTML tags (ids 5-...; the list as the Gemma-2-style SentencePiece trainer settings quoted in a public tokenizer
  extension script give it, "same as gemma-2"); then PaliGemma's ``<loc0000>``..``<loc1023>`` (256000-257023),
  ``<seg000>``..``<seg127>`` (257024-257151) and the special ``<image>`` 257152. ``<bos>`` put in front by the
  tokenizer.json post-processor; tokenizer_config.json's ``add_bos_token`` true, which transformers 5.19 drops when
  a tokenizer.json is present, so vLLM 0.32 reads it as false and inserts the image tokens at the very start (its
  PaliGemma 2 path) rather than after a leading ``<bos>``, as it does for the real checkpoint.

The tiny model: hidden 128, head size 64, two Gemma layers, a two-layer SigLIP of width 128; byte-level tokenizer
(ids 0-255 are bytes), so config.json's image_token_index is the tiny tokenizer's ``<image>`` id.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import processors
from transformers import GemmaConfig, PaliGemmaConfig, PaliGemmaProcessor, SiglipImageProcessor, SiglipVisionConfig

from vlm_demo.tiny_models.common import (
    LM_HEAD_DIM,
    LM_HIDDEN,
    LM_SIZES,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

SIZE, PATCH, TOKENS = 224, 14, 256

#: The special tokens: Gemma's control pieces and PaliGemma's image token.
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<image>"]


def _html_tags() -> list[str]:
    """Gemma 1/2's 48 HTML tag pieces: each group's openers, then its closers."""
    groups = (("table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td"),
              ("h1", "h2", "h3", "h4", "h5", "h6", "blockquote"),
              ("strong", "em", "b", "i", "u", "s", "sub", "sup", "code"))
    return [f"<{slash}{tag}>" for group in groups for slash in ("", "/") for tag in group]


#: The other added tokens, not special, in id order.
PLAIN_TOKENS = (["<2mass>", "[@BOS@]"] + [f"<unused{i}>" for i in range(99)] + ["<start_of_turn>", "<end_of_turn>"]
                + ["\n" * n for n in range(1, 32)] + ["\u2581" * n for n in range(2, 32)] + _html_tags()
                + [f"<loc{i:0>4}>" for i in range(1024)] + [f"<seg{i:0>3}>" for i in range(128)])


def build(out: Path) -> None:
    """Write a tiny paligemma-3b-mix-224-shaped model directory into ``out`` (no chat template)."""
    tokenizer = build_tokenizer(
        SPECIAL_TOKENS, bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", added_tokens=PLAIN_TOKENS,
        extra={"mask_token": "<mask>", "add_bos_token": True, "add_eos_token": False,
               "extra_special_tokens": {"image_token": "<image>"}, "clean_up_tokenization_spaces": False,
               "spaces_between_special_tokens": False},
    )
    bos = token_id(tokenizer, "<bos>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)])
    image_processor = SiglipImageProcessor(
        size={"height": SIZE, "width": SIZE}, resample=3, do_resize=True, do_rescale=True, rescale_factor=1 / 255,
        do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor.image_seq_length = TOKENS
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)
    vocab = padded_vocab_size(tokenizer)
    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(
            **VISION_SIZES, image_size=SIZE, patch_size=PATCH, projection_dim=LM_HIDDEN, hidden_act="gelu_pytorch_tanh",
            vision_use_head=False,
        ).to_dict() | {"num_image_tokens": TOKENS},
        text_config=GemmaConfig(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=vocab, max_position_embeddings=8192,
            hidden_activation="gelu_pytorch_tanh", bos_token_id=bos, eos_token_id=token_id(tokenizer, "<eos>"),
            pad_token_id=token_id(tokenizer, "<pad>"),
        ).to_dict() | {"num_image_tokens": TOKENS},
        image_token_index=token_id(tokenizer, "<image>"), projection_dim=LM_HIDDEN, hidden_size=LM_HIDDEN,
        vocab_size=vocab,
    )
    config.architectures = ["PaliGemmaForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
    # the processor turned its tokenizer's <bos> off; the checkpoint's tokenizer.json puts it in front, and its
    # tokenizer_config.json says add_bos_token true (which transformers 5 drops where a tokenizer.json is present)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)])
    tokenizer.save_pretrained(out)
    path = out / "tokenizer_config.json"
    write_json(path, {**json.loads(path.read_text()), "add_bos_token": True, "add_eos_token": False})
