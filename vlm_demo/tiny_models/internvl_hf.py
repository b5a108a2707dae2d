"""The tiny HF-format InternVL (``OpenGVLab/InternVL3_5-1B-HF``, ``internvl``): its tokenizer (Qwen3's plus
InternVL's tokens), GotOcr2 image processor and InternVL processor, chat template, tiny Qwen3 and InternViT."""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken
from transformers import GotOcr2ImageProcessor, InternVLConfig, InternVLProcessor, InternVLVideoProcessor, Qwen3Config

from ..families.internvl_hf import MAX_PATCHES, MIN_PATCHES, TILE, TOKENS_PER_TILE
from .common import (
    INTERNVL_TOKENS,
    LM_HEAD_DIM,
    LM_SIZES,
    QWEN2_SPECIAL_TOKENS,
    QWEN3_PLAIN_TOKENS,
    VISION_SIZES,
    build_tokenizer,
    padded_vocab_size,
    token_id,
)

# chat_template.jinja of OpenGVLab/InternVL3_5-1B-HF (481 bytes; the template transformers'
# convert_internvl_weights_to_hf.py writes): no system prompt, content format "openai", one
# "<IMG_CONTEXT>\n" per image part.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}"
)

#: InternVL's special tokens (ids 151669-151677 after Qwen3's) and the HF conversion's ``<video>`` (151678).
SPECIAL_TOKENS = [*INTERNVL_TOKENS, "<video>"]

#: The named tokens InternVLProcessor reads from the tokenizer (tokenizer_config.json extra_special_tokens).
NAMED_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>"}

#: preprocessor_config.json's ImageNet normalisation.
IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])


def build(out: Path) -> None:
    """Write a tiny InternVL3.5-1B-HF-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, added_tokens=QWEN3_PLAIN_TOKENS,
                                extra={"model_max_length": 8192, "extra_special_tokens": NAMED_TOKENS})
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
                         special_tokens=True)  # the four named ones are in already, so <video> comes before <quad>
    image_processor = GotOcr2ImageProcessor(size={"height": TILE, "width": TILE}, crop_to_patches=False,
                                            min_patches=MIN_PATCHES, max_patches=MAX_PATCHES, **IMAGENET)
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                  video_processor=InternVLVideoProcessor(), image_seq_length=TOKENS_PER_TILE,
                                  chat_template=CHAT_TEMPLATE)
    config = InternVLConfig(
        text_config=Qwen3Config(
            **LM_SIZES, head_dim=LM_HEAD_DIM, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=40960,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-6,
            tie_word_embeddings=False, bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            eos_token_id=token_id(tokenizer, "<|im_end|>"), architectures=["Qwen3ForCausalLM"],
        ).to_dict(),
        # InternViT-300M-448px geometry (448 px, patch 14; pixel shuffle 0.5 -> 256 tokens), tiny widths.
        vision_config=dict(
            **VISION_SIZES, image_size=[TILE, TILE], patch_size=[14, 14], attention_bias=True, use_qk_norm=False,
            norm_type="layer_norm", layer_norm_eps=1e-6, use_absolute_position_embeddings=True,
        ),
        image_token_id=token_id(tokenizer, "<IMG_CONTEXT>"), image_seq_length=TOKENS_PER_TILE,
        downsample_ratio=0.5, projector_hidden_act="gelu", tie_word_embeddings=False,
    )
    config.architectures = ["InternVLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
