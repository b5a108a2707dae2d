"""Gemma 3, as ``google/gemma-3-4b-it`` (``gemma3``: SigLIP at 896 px / patch 14, pooled to 256 tokens, + Gemma 3).

Each ``<start_of_image>`` becomes ``\\n\\n<start_of_image>`` + 256 ``<image_soft_token>`` + ``<end_of_image>\\n\\n``;
with pan-and-scan: "Here is the original image " + that + " and here are some crops to help you see better "
+ one per crop, space-separated.

Pan-and-scan (off by default) cuts an image whose aspect ratio is at least 1.2 into 2 to
``pan_and_scan_max_num_crops`` crops along its long side (one row for a landscape image, one column
for a portrait one), each crop at least ``pan_and_scan_min_crop_size`` px; the original is kept as the
global view, and it and every crop are resized to 896x896. The tiny tokenizer is byte-level with no
merges, with the real one's added tokens (its SentencePiece control and user-defined pieces, among them
the newline runs vLLM's Gemma 3 processor looks up, plus ``<image_soft_token>``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image
from transformers import Gemma3Config, Gemma3ImageProcessor, Gemma3Processor, Gemma3TextConfig, SiglipVisionConfig

from ..tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)
from .base import Adapter, Control, ItemGeometry, KnownCount

SIZE = 896
"""SigLIP input size: the original image and every crop are resized to 896x896."""
PATCH = 14
"""SigLIP patch size: 64x64 patches per view, average-pooled 4x4 to 16x16 = 256 tokens."""
TOKENS_PER_VIEW = 256
"""``mm_tokens_per_image`` / ``image_seq_length``: tokens per view (the original and each crop)."""
PAS_DEFAULTS = {"do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256, "pan_and_scan_max_num_crops": 4,
                "pan_and_scan_min_ratio_to_activate": 1.2}
"""Pan-and-scan settings the real checkpoint leaves to ``Gemma3ProcessorKwargs`` (its preprocessor config
has them null)."""

BOI, EOI, IMAGE_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"

# chat_template of google/gemma-3-4b-it, verbatim (as its tokenizer_config.json is quoted in ShishirPatil/gorilla,
# bfcl/model_handler/local_inference/gemma.py). A system message is folded into the first user turn; each
# image part becomes "<start_of_image>" (content format "openai").
CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"
)


def _html_tags() -> list[str]:
    """The 70 HTML tags among Gemma 3's user-defined pieces: each group's openers, then its closers."""
    groups = (("table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td"),
              ("h1", "h2", "h3", "h4", "h5", "h6", "blockquote"),
              ("strong", "em", "b", "i", "u", "s", "sub", "sup", "code"),
              ("a", "html", "body", "img", "span", "bbox", "ul", "li", "div", "iframe", "footer"))
    return [f"<{slash}{tag}>" for group in groups for slash in ("", "/") for tag in group]


#: Special tokens of the real tokenizer (control pieces, <unk>, <mask>, the turn and image markers).
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", BOI, EOI,
                  IMAGE_TOKEN]
#: The real tokenizer's other added tokens (its SentencePiece user-defined pieces), not special, in id
#: order: [multimodal] (id 5), <unused0-98> (6-104), newline runs 1-31 (107-137), "▁" runs 2-31
#: (138-167), 70 HTML tags (168-237), tab runs 1-31 (255968-255998), <unused99-6241> (256001-262143).
PLAIN_TOKENS = (["[multimodal]"] + [f"<unused{i}>" for i in range(99)] + ["\n" * n for n in range(1, 32)]
                + ["\u2581" * n for n in range(2, 32)] + _html_tags() + ["\t" * n for n in range(1, 32)]
                + [f"<unused{i}>" for i in range(99, 6242)])

#: Tiny SigLIP: head size 64, the real geometry (896 px, patch 14).
VISION_CONFIG = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "image_size": SIZE, "patch_size": PATCH, "layer_norm_eps": 1e-6, "vision_use_head": False}


def build(out: Path) -> None:
    """Write a tiny gemma-3-4b-it-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(
        SPECIAL_TOKENS, bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", chat_template=CHAT_TEMPLATE,
        added_tokens=PLAIN_TOKENS,
        extra={"mask_token": "<mask>", "add_bos_token": True, "add_eos_token": False,
               "spaces_between_special_tokens": False, "clean_up_tokenization_spaces": False,
               "extra_special_tokens": {"image_token": IMAGE_TOKEN, "boi_token": BOI, "eoi_token": EOI}},
    )
    image_processor = Gemma3ImageProcessor(
        size={"height": SIZE, "width": SIZE}, resample=2, do_resize=True, do_rescale=True, rescale_factor=1 / 255,
        do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE,
                                image_seq_length=TOKENS_PER_VIEW)
    text_config = Gemma3TextConfig(
        hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=2,
        num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS, head_dim=64, query_pre_attn_scalar=64,
        layer_types=["sliding_attention", "full_attention"], sliding_window_pattern=2, sliding_window=1024,
        vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
        bos_token_id=token_id(tokenizer, "<bos>"), eos_token_id=token_id(tokenizer, "<eos>"),
        pad_token_id=token_id(tokenizer, "<pad>"),
    )
    config = Gemma3Config(
        text_config=text_config.to_dict(), vision_config=SiglipVisionConfig(**VISION_CONFIG).to_dict(),
        mm_tokens_per_image=TOKENS_PER_VIEW, boi_token_index=token_id(tokenizer, BOI),
        eoi_token_index=token_id(tokenizer, EOI), image_token_index=token_id(tokenizer, IMAGE_TOKEN),
        eos_token_id=[token_id(tokenizer, "<eos>"), token_id(tokenizer, "<end_of_turn>")],
    )
    config.architectures = ["Gemma3ForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)


def num_crops(width: int, height: int, mm_kwargs: Mapping[str, Any]) -> int:
    """``Gemma3ImageProcessor.pan_and_scan``'s crop count (0: no pan-and-scan) for an image and kwargs."""
    kw = {**PAS_DEFAULTS, **mm_kwargs}
    if not kw["do_pan_and_scan"]:
        return 0
    long, short = max(width, height), min(width, height)
    if long / short < kw["pan_and_scan_min_ratio_to_activate"]:
        return 0
    n = min(int(math.floor(long / kw["pan_and_scan_min_crop_size"])), int(math.floor(long / short + 0.5)))
    n = min(kw["pan_and_scan_max_num_crops"], max(2, n))
    crop_long = int(math.ceil(long / n))
    return n if min(crop_long, short) >= kw["pan_and_scan_min_crop_size"] else 0


def _views(image: Image.Image, crops: int) -> ItemGeometry:
    """The geometry of an image cut into ``crops`` pan-and-scan crops (0: the 896x896 view alone)."""
    if not crops:
        return ItemGeometry(image.size, (SIZE, SIZE), None, None)
    width, height = image.size
    return ItemGeometry(image.size, (SIZE, SIZE), (1, crops) if width >= height else (crops, 1), True)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Crops from the engine's own view count (``num_patches`` = crops + 1, the original first); the
    crop direction follows the image's long side. None when the pixel views are not 896x896 squares."""
    if image is None:
        return None
    views = int(fields["num_patches"])
    height, width = fields["pixel_values"].shape[-2:]
    if (width, height) != (SIZE, SIZE) or views != fields["pixel_values"].shape[0]:
        return None
    return _views(image, views - 1)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The pan-and-scan rule with the checkpoint's defaults and ``mm_kwargs``, if it gives ``count``."""
    crops = num_crops(*image.size, mm_kwargs)
    return _views(image, crops) if (crops + 1) * TOKENS_PER_VIEW == count else None


#: What vLLM puts for one image (``Gemma3Processor.full_image_sequence``), and with pan-and-scan crops
#: (``Gemma3ProcessingInfo.get_image_repl``): the original image, then the crops, in one phrase.
_VIEW = r"\n\n<start_of_image>(?:<image_soft_token>)+<end_of_image>\n\n"
_EXPANSION = re.compile(rf"Here is the original image {_VIEW} and here are some crops to help you see better "
                        rf"{_VIEW}(?: {_VIEW})*|{_VIEW}")


def unexpand(text: str) -> str:
    """The template's output from the decoded expanded prompt: each image's expansion back to ``<start_of_image>``."""
    return _EXPANSION.sub("<start_of_image>", text)


ADAPTER = Adapter(
    name="gemma3", title="Gemma 3", model_types=("gemma3",), feature_tokens={"image": IMAGE_TOKEN},
    placeholders={"image": BOI},
    # vLLM's range runs from the "\n\n" before <start_of_image> to the one after <end_of_image> (with
    # pan-and-scan: over the whole "Here is the original image ..." text), and those newlines merge with
    # the text's own ("\n\n\n"), so the ids alone do not give the ranges.
    ranges_from_ids=False,
    controls=(Control("do_pan_and_scan", label="pan-and-scan (extra 896 px crops, 256 tokens each)", kind="bool", sizes_cache=True, default=False),
              Control("pan_and_scan_max_num_crops", label="pan_and_scan_max_num_crops", min=1, max=8, sizes_cache=True, default=4),
              Control("pan_and_scan_min_crop_size", label="pan_and_scan_min_crop_size (px)", min=32, max=SIZE, default=256)),
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count}, unexpand=unexpand,
    build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 256, "pan-and-scan off (the checkpoint's default): one 896x896 view = "
                   "mm_tokens_per_image 256 (SigLIP 896/14 = 64x64 patches, pooled 4x4)"),
        KnownCount((640, 480), 768, "do_pan_and_scan: ratio 1.33 >= 1.2 -> max(2, min(640//256, round(1.33))) "
                   "= 2 crops of 320x480 + the original = 3 x 256", {"do_pan_and_scan": True}),
        KnownCount((1600, 400), 1280, "do_pan_and_scan: ratio 4 -> min(4 max crops, 1600//256, 4) = 4 crops "
                   "of 400x400 + the original = 5 x 256", {"do_pan_and_scan": True}),
        KnownCount((1600, 400), 768, "pan_and_scan_max_num_crops 2: 2 crops of 800x400 + the original = 3 x 256",
                   {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 2}),
    )},
)
