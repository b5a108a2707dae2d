"""The tiny Qwen2.5-Omni (``Qwen/Qwen2.5-Omni-7B``): the checkpoint's config layout (``qwen2_5_omni`` with a
thinker, a talker and token2wav; vLLM serves the thinker), its processor (Whisper-style extractor: 128 mel bins,
16 kHz, hop 160, 300-s chunks; Qwen2.5-VL's image processor: patch 14, merge 2, temporal patch 2, its pixel bounds),
its tokenizer's added tokens in the checkpoint's id order and its chat template, with a tiny thinker.

Sources (stored copies read 2026-12-07; [C] the checkpoint's own page or an issue quoting it, [D] a derivative or
duplicate checkpoint's identical file, [T] transformers 5.19's config defaults, whose docstrings name this checkpoint):
- config.json: ``architectures`` ["Qwen2_5OmniModel"], ``model_type`` qwen2_5_omni, ``enable_audio_output`` [C:
  QwenLM/Qwen2.5-Omni#296]; thinker token fields (audio_token_index 151646, image 151655, video 151656,
  audio_start/end 151647/151648, user 872, position_id_per_seconds 25, seconds_per_chunk 2), text (vocab 152064,
  ``mrope_section`` [16, 24, 24]), audio encoder (128 mel bins, 1500 source positions, ``n_window`` 100) and vision
  encoder (patch 14, merge 2, temporal patch 2, window 112, ``tokens_per_second`` 25) [D = T]. The talker and token2wav
  configs are written at transformers' defaults (vLLM's thinker never reads them) [T].
- preprocessor_config.json (667 B) [D, two identical copies]: WhisperFeatureExtractor feature_size 128, sampling_rate
  16000, hop_length 160, chunk_length 300, n_fft 400, n_samples 4800000, nb_max_frames 30000, dither 0.0,
  padding_value 0.0, padding_side right, return_attention_mask true; Qwen2VLImageProcessor patch 14, merge 2, temporal
  patch 2, min_pixels 3136, max_pixels 12845056, CLIP mean/std. The checkpoint has no video processor config:
  transformers' Qwen2VLVideoProcessor defaults (128-768 cells a frame) are those ``Qwen2_5OmniProcessor`` also sets.
- added_tokens.json (22 tokens, 151643-151664) [D, same 579-B file]: ``<|endoftext|>``, ``<|im_start|>``,
  ``<|im_end|>``, ``<|AUDIO|>``, ``<|audio_bos|>``, ``<|audio_eos|>``, ``<|box_end|>``, ``<|quad_start|>``,
  ``<|quad_end|>``, ``<|vision_bos|>``, ``<|vision_eos|>``, ``<|vision_pad|>``, ``<|IMAGE|>``, ``<|VIDEO|>`` (special
  [D: special_tokens_map.json]), then Qwen2.5's eight non-special ones (``<tool_call>`` ... ``<|file_sep|>``: special
  false is Qwen2.5's convention, not confirmed for this file). The ids agree with the config's token fields.
- tokenizer_config.json [D]: eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos, model_max_length 32768, and the named
  tokens the processor reads (``audio_token`` ... ``audio_eos_token``).
- chat_template.json [D, very likely identical: two fine-tunes' 1.28-kB template], written here as transformers 5
  writes it (chat_template.jinja, the same text); the Qwen-recommended system prompt ("You are Qwen, a virtual human
  ...") is not in it.
Not confirmed: the real tokenizer.json's merges (a byte-level tokenizer with no merges stands in, as for every tiny
model), generation_config.json, and the thinker's names (if any) for the vision_bos/eos ids.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    Qwen2_5OmniConfig,
    Qwen2_5OmniProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    WhisperFeatureExtractor,
)

from ..families.qwen2_5_omni import CAP_S, MAX_PIXELS, MIN_PIXELS
from ..families.qwen2_audio import HOP, RATE
from .common import (
    CLIP_NORMALIZE,
    LM_HIDDEN,
    LM_SIZES,
    QWEN2_5_ADDED_TOKENS,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_INTERMEDIATE,
    VISION_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    token_ids,
)
from .qwen2_5_vl import MROPE_SECTION

#: The checkpoint's chat template (chat_template.json): pictures, clips and videos by part type or key.
CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}{% if add_audio_id %}Audio {{ audio_count.value }}: "
    "{% endif %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: The special added tokens, in id order (151643-151656 there); Qwen2.5's eight plain ones follow.
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>", "<|VIDEO|>",
]

#: tokenizer_config.json's named tokens, which ``Qwen2_5OmniProcessor`` reads off the tokenizer.
NAMED_TOKENS = {
    "audio_token": "<|AUDIO|>", "image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>",
}

#: The thinker config's token fields.
TOKEN_FIELDS = {
    "audio_token_index": "<|AUDIO|>", "image_token_index": "<|IMAGE|>", "video_token_index": "<|VIDEO|>",
    "audio_start_token_id": "<|audio_bos|>", "audio_end_token_id": "<|audio_eos|>",
}


def build(out: Path) -> None:
    """Write the tiny Qwen2.5-Omni into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                added_tokens=QWEN2_5_ADDED_TOKENS, chat_template=CHAT_TEMPLATE,
                                extra={"model_max_length": 32768, **NAMED_TOKENS})
    features = WhisperFeatureExtractor(feature_size=128, sampling_rate=RATE, hop_length=HOP, chunk_length=int(CAP_S),
                                       n_fft=400, padding_value=0.0, dither=0.0, return_attention_mask=True)
    images = Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=2, merge_size=2, min_pixels=MIN_PIXELS,
                                   max_pixels=MAX_PIXELS, **CLIP_NORMALIZE)
    thinker = dict(
        audio_config=dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                          d_model=128, max_source_positions=1500, n_window=100, output_dim=LM_HIDDEN),
        vision_config=dict(depth=VISION_LAYERS, hidden_size=VISION_HIDDEN, intermediate_size=VISION_INTERMEDIATE,
                           num_heads=VISION_HEADS, in_channels=3, patch_size=14, spatial_patch_size=14,
                           temporal_patch_size=2, spatial_merge_size=2, window_size=112, fullatt_block_indexes=[1],
                           out_hidden_size=LM_HIDDEN, tokens_per_second=25),
        text_config=dict(**LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=32768,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                          "mrope_section": MROPE_SECTION},
                         rms_norm_eps=1e-6, tie_word_embeddings=False),
        position_id_per_seconds=25, seconds_per_chunk=2, user_token_id=872,
        bos_token_id=token_id(tokenizer, "<|im_start|>"), eos_token_id=token_id(tokenizer, "<|im_end|>"),
        pad_token_id=token_id(tokenizer, "<|endoftext|>"), **token_ids(tokenizer, TOKEN_FIELDS),
    )
    config = Qwen2_5OmniConfig(thinker_config=thinker, enable_audio_output=True)
    config.architectures = ["Qwen2_5OmniModel"]
    config.save_pretrained(out)
    processor = Qwen2_5OmniProcessor(image_processor=images, video_processor=Qwen2VLVideoProcessor(),
                                     feature_extractor=features, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)  # (the template as transformers 5 writes it: chat_template.jinja; the checkpoint
                                    # keeps the same text in chat_template.json)
