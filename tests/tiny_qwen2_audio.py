"""Tiny Qwen2-Audio (``Qwen/Qwen2-Audio-7B-Instruct`` layout), a model that listens, with no adapter yet.

It stands for the audio path's tests: the app must take everything from vLLM at run time (the modality, the
placeholder, the feature token, the counts, the rate its processor takes) and choose the content format the template
needs. Whisper-style features (128 mel bins, 16 kHz, hop 160, 30-s chunks): 100 frames a second, two stride-2 steps,
25 tokens a second, at most 750 (vLLM's Qwen2-Audio cuts a clip at 30 s).

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

from pathlib import Path

from transformers import Qwen2AudioConfig, Qwen2AudioProcessor, WhisperFeatureExtractor

from vlm_demo.tiny_models.common import LM_SIZES, build_tokenizer, padded_vocab_size, token_id

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

AUDIO_TOKEN = "<|AUDIO|>"


def tokens_for(seconds: float, rate: int = 16_000) -> int:
    """The checkpoint's count for a clip of ``seconds`` (its first 30 s): Whisper frames of 160 samples, then the
    encoder's two stride-2 steps (``Qwen2AudioEncoder._get_feat_extract_output_lengths``)."""
    frames = min(int(seconds * rate), 30 * rate) // 160
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def build(out: Path) -> None:
    """Write the tiny Qwen2-Audio into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, extra={"model_max_length": 8192})
    features = WhisperFeatureExtractor(feature_size=128, sampling_rate=16_000, hop_length=160, chunk_length=30,
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
