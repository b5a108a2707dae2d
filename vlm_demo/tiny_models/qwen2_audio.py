"""The tiny Qwen2-Audio (``Qwen/Qwen2-Audio-7B-Instruct``): its feature extractor (Whisper-style: 128 mel bins,
16 kHz, hop 160, 30-s chunks: 25 tokens a second, at most 750), its tokenizer's special tokens and chat template,
with a tiny encoder and language model.

Sources of the real values (stored copies of the checkpoint's Hugging Face pages, read 2026-12-07): config.json
(``qwen2_audio``, audio_token_index 151646, vocab 156032; the audio encoder: 128 mel bins, 1500 source positions;
the Qwen2 text model: bos 151643, eos 151645 ``<|im_end|>``), preprocessor_config.json (WhisperFeatureExtractor:
feature_size 128, sampling_rate 16000, hop_length 160, chunk_length 30, n_fft 400, n_samples 480000, nb_max_frames
3000, padding_value 0.0, return_attention_mask true; processor_class Qwen2AudioProcessor) and tokenizer_config.json's
chat template on the main branch: text only (no chat_template.json there; transformers' Qwen2AudioProcessor then
brings its own default, which writes ``Audio N: <|audio_bos|><|AUDIO|><|audio_eos|>``). Added tokens confirmed
151643-151651 (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<|AUDIO|>``, ``<|audio_bos|>``,
``<|audio_eos|>``, ``<|box_end|>``, ``<|quad_start|>``, ``<|quad_end|>``, all special); the checkpoint's further
added tokens (some thousands, up to ``<|nan|>``) could not be read offline and are left out: a gap to close with
the file itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import Qwen2AudioConfig, Qwen2AudioProcessor, WhisperFeatureExtractor

from ..families.qwen2_audio import AUDIO_TOKEN, CAP_S, HOP, RATE
from .common import LM_SIZES, build_tokenizer, padded_vocab_size, token_id, write_json

#: tokenizer_config.json's chat template on the checkpoint's main branch (text only).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: The added tokens confirmed, in id order (151643-151651 there).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>",
                  "<|box_end|>", "<|quad_start|>", "<|quad_end|>"]


def build(out: Path) -> None:
    """Write the tiny Qwen2-Audio into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 8192})
    features = WhisperFeatureExtractor(feature_size=128, sampling_rate=RATE, hop_length=HOP, chunk_length=int(CAP_S),
                                       n_fft=400, padding_value=0.0, return_attention_mask=True)
    processor = Qwen2AudioProcessor(feature_extractor=features, tokenizer=tokenizer)
    config = Qwen2AudioConfig(
        audio_config=dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                          d_model=128, max_source_positions=1500),
        text_config=dict(**LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=8192,
                         bos_token_id=token_id(tokenizer, "<|endoftext|>"),
                         eos_token_id=token_id(tokenizer, "<|im_end|>"), model_type="qwen2"),
        audio_token_index=token_id(tokenizer, AUDIO_TOKEN),
    )
    config.architectures = ["Qwen2AudioForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
    for name in ("chat_template.json", "chat_template.jinja"):  # (the checkpoint has none: the processor brings
        (out / name).unlink(missing_ok=True)                      # transformers' default as it loads)
    # the checkpoint's text-only template, where it keeps it: in tokenizer_config.json
    config_path = out / "tokenizer_config.json"
    write_json(config_path, {**json.loads(config_path.read_text()), "chat_template": CHAT_TEMPLATE})
