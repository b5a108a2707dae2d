"""The tiny Gemma 3 (``google/gemma-3-4b-it``): its tokenizer's added tokens (byte-level with no merges), image
processor (896 px) and chat template, with tiny Gemma 3 and SigLIP towers.

The tokenizer has the real one's added tokens: its SentencePiece control and user-defined pieces, among them
the newline runs vLLM's Gemma 3 processor looks up, plus ``<image_soft_token>``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Gemma3Config, Gemma3ImageProcessor, Gemma3Processor, Gemma3TextConfig, SiglipVisionConfig

from ..families.gemma3 import BOI, EOI, IMAGE_TOKEN, PATCH, SIZE, TOKENS_PER_VIEW
from .common import LM_HEAD_DIM, LM_SIZES, VISION_SIZES, build_tokenizer, padded_vocab_size, token_id

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
VISION_CONFIG = {**VISION_SIZES, "image_size": SIZE, "patch_size": PATCH, "layer_norm_eps": 1e-6,
                 "vision_use_head": False}


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
        **LM_SIZES, head_dim=LM_HEAD_DIM, query_pre_attn_scalar=LM_HEAD_DIM,
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
