"""The tiny Gemma 4 E2B (``google/gemma-4-E2B-it``): the checkpoint's config layout (``gemma4``: a Gemma 4 text model,
a ViT with 3x3 pooling, a Conformer audio tower), its processor (``Gemma4Processor``: 280 soft tokens a picture, at most
750 a clip at 40 ms each; the audio extractor at 16 kHz, 128 mel bins), its tokenizer's named tokens and a reduced form
of its chat template, with tiny towers and language model.

Sources (read 2026-12-08; [T] transformers 5.19's ``gemma4`` classes, whose docstrings name this checkpoint; [V] vLLM
0.32's ``gemma4_mm.py`` / ``registry.py``; [S] second-hand copies of the checkpoint's files in public repositories,
several agreeing; no first-hand copy of the checkpoint's own files was found, so nothing here is [C]onfirmed from them):
- config.json: ``architectures`` ["Gemma4ForConditionalGeneration"] (vLLM maps it to ``gemma4_mm``) [S, V], ``model_type``
  gemma4 [S, T]; token fields image 258880, audio 258881, video 258884, boi 255999, eoi 258882, boa 256000, eoa 258883
  (written ``eoa_token_id``; transformers' field is ``eoa_token_index``: both written here) [S = T defaults]; eos
  [1, 106] [S]. Text: 35 layers (every fifth full attention), hidden 1536, 8 heads, 1 KV head, head_dim 256 / global
  512, sliding window 512, per-layer inputs 256, 20 KV-shared layers, double-wide MLP, soft-capping 30 [S]; tiny here.
  Vision: patch 16, pooling 3, position table 10240, clipped linears [S]; ``default_output_length`` 280 (vLLM reads it
  from the config: it must be there) [V]. Audio: 12 layers, hidden 1024, 8 heads, subsampling channels [128, 32],
  conv kernel 5, chunk 12, context 13 / 0, clipped linears, output 1536 (= the text hidden size) [S]; tiny here.
- processor_config.json: ``image_seq_length`` 280, ``audio_seq_length`` 750, ``audio_ms_per_token`` 40 [S = T
  defaults]; feature extractor: feature_size 128, sampling_rate 16000, frame 20 ms / hop 10 ms (320 / 160 samples),
  fft 512, no overdrive, dither 0, input scale 1, 0-8000 Hz, mel floor 1e-3, no preemphasis, no per-bin
  normalisation, padding right [S: a runtime that accepts only the released values lists exactly these = T defaults];
  image processor: patch 16, max_soft_tokens 280, pooling 3, rescale, no normalisation [T defaults, not confirmed].
- tokenizer_config.json [S, a text-only repack of this checkpoint]: ``<bos>`` / ``<eos>`` / ``<pad>`` / ``<unk>`` /
  ``<mask>``, the named tokens ``image_token`` ``<|image|>``, ``boi_token`` ``<|image>``, ``eoi_token`` ``<image|>``,
  ``audio_token`` ``<|audio|>``, ``boa_token`` ``<|audio>``, ``eoa_token`` ``<audio|>``, turn, channel, tool and think
  tokens, ``extra_special_tokens`` ["<|video|>"], padding side left. Not written: its ``response_schema`` and
  ``tokenizer_class`` GemmaTokenizer (the byte-level stand-in loads as the generic fast tokenizer).
- added-token ids, in the order used here [S: tool tokens 46-52 "verified against tokenizer.json" in one project, the
  channel and turn ids in several]: ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4, ``<|tool>`` 46,
  ``<tool|>`` 47, ``<|tool_call>`` 48, ``<tool_call|>`` 49, ``<|tool_response>`` 50, ``<tool_response|>`` 51, ``<|"|>``
  52, ``<|think|>`` 98 (one source only), ``<|channel>`` 100, ``<channel|>`` 101, ``<|turn>`` 105, ``<turn|>`` 106,
  ``<|image>`` 255999, ``<|audio>`` 256000, ``<|image|>`` 258880, ``<|audio|>`` 258881, ``<image|>`` 258882,
  ``<audio|>`` 258883, ``<|video|>`` 258884 (the config's fields agree). The vocabulary's other added pieces (Gemma 3
  had unused slots, newline and tab runs, HTML tags) could not be read and are left out.
- chat template: reduced from the E4B template as quoted by a public SFT tool (its ``{% generation %}`` markers removed;
  E2B's is reported near-identical): ``<bos>``, a system turn for a system message or ``enable_thinking``
  (``<|think|>``), ``<|turn>user\\n`` / ``<|turn>model\\n`` ... ``<turn|>\\n``, text trimmed, a model's thinking
  stripped, ``<|image|>`` / ``<|audio|>`` / ``<|video|>`` for the parts, ``<|turn>model\\n`` to answer. Tools, tool
  calls and tool responses are left out (the app sends none).
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    Gemma4AudioFeatureExtractor,
    Gemma4Config,
    Gemma4ImageProcessor,
    Gemma4Processor,
    Gemma4VideoProcessor,
)

from ..families.gemma4 import AUDIO_TOKEN, IMAGE_TOKEN, MAX_AUDIO_TOKENS, MAX_SOFT_TOKENS, PATCH, POOL, RATE
from .common import LM_HEAD_DIM, LM_HIDDEN, LM_SIZES, VISION_SIZES, build_tokenizer, padded_vocab_size, token_id

#: The checkpoint's chat template, reduced to what the app sends (see the module docstring).
CHAT_TEMPLATE = (
    "{%- macro strip_thinking(text) -%}{%- set ns = namespace(result='') -%}"
    "{%- for part in text.split('<channel|>') -%}{%- if '<|channel>' in part -%}"
    "{%- set ns.result = ns.result + part.split('<|channel>')[0] -%}{%- else -%}"
    "{%- set ns.result = ns.result + part -%}{%- endif -%}{%- endfor -%}{{- ns.result | trim -}}{%- endmacro -%}\n"
    "{%- set loop_messages = messages -%}{{- bos_token -}}\n"
    "{%- if (enable_thinking is defined and enable_thinking) or messages[0]['role'] in ['system', 'developer'] -%}"
    "{{- '<|turn>system\\n' -}}{%- if enable_thinking is defined and enable_thinking -%}{{- '<|think|>\\n' -}}"
    "{%- endif -%}{%- if messages[0]['role'] in ['system', 'developer'] -%}"
    "{%- if messages[0]['content'] is string -%}{{- messages[0]['content'] | trim -}}"
    "{%- elif messages[0]['content'] is sequence -%}{%- for item in messages[0]['content'] -%}"
    "{{- item['text'] | trim + ' ' -}}{%- endfor -%}{%- endif -%}{%- set loop_messages = messages[1:] -%}"
    "{%- endif -%}{{- '<turn|>\\n' -}}{%- endif -%}\n"
    "{%- for message in loop_messages -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<|turn>' + role + '\\n' -}}{%- if message['content'] is string -%}"
    "{%- if role == 'model' -%}{{- strip_thinking(message['content']) -}}{%- else -%}"
    "{{- message['content'] | trim -}}{%- endif -%}{%- elif message['content'] is sequence -%}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'text' -%}"
    "{%- if role == 'model' -%}{{- strip_thinking(item['text']) -}}{%- else -%}{{- item['text'] | trim -}}{%- endif -%}"
    "{%- elif item['type'] == 'image' -%}{{- '<|image|>' -}}{%- elif item['type'] == 'audio' -%}{{- '<|audio|>' -}}"
    "{%- elif item['type'] == 'video' -%}{{- '<|video|>' -}}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<turn|>\\n' -}}{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)

#: The added tokens, in the real ids' order (see the module docstring), all special.
SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<unk>", "<mask>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
    "<|think|>", "<|channel>", "<channel|>", "<|turn>", "<turn|>",
    "<|image>", "<|audio>", IMAGE_TOKEN, AUDIO_TOKEN, "<image|>", "<audio|>", "<|video|>",
]

#: tokenizer_config.json's named tokens (the processor reads the image and audio ones off the tokenizer).
NAMED_TOKENS = {
    "image_token": IMAGE_TOKEN, "boi_token": "<|image>", "eoi_token": "<image|>",
    "audio_token": AUDIO_TOKEN, "boa_token": "<|audio>", "eoa_token": "<audio|>",
    "sot_token": "<|turn>", "eot_token": "<turn|>", "soc_token": "<|channel>", "eoc_token": "<channel|>",
    "think_token": "<|think|>", "escape_token": '<|"|>', "std_token": "<|tool>", "etd_token": "<tool|>",
    "stc_token": "<|tool_call>", "etc_token": "<tool_call|>", "str_token": "<|tool_response>",
    "etr_token": "<tool_response|>",
}

#: config.json's token fields.
TOKEN_FIELDS = {
    "image_token_id": IMAGE_TOKEN, "audio_token_id": AUDIO_TOKEN, "video_token_id": "<|video|>",
    "boi_token_id": "<|image>", "eoi_token_id": "<image|>", "boa_token_id": "<|audio>",
    "eoa_token_id": "<audio|>", "eoa_token_index": "<audio|>",
}


def build(out: Path) -> None:
    """Write the tiny Gemma 4 E2B into ``out``."""
    tokenizer = build_tokenizer(
        SPECIAL_TOKENS, bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", chat_template=CHAT_TEMPLATE,
        extra={"mask_token": "<mask>", "padding_side": "left", "extra_special_tokens": ["<|video|>"],
               **NAMED_TOKENS},
    )
    features = Gemma4AudioFeatureExtractor(
        feature_size=128, sampling_rate=RATE, padding_value=0.0, return_attention_mask=True, frame_length_ms=20.0,
        hop_length_ms=10.0, min_frequency=0.0, max_frequency=8000.0, preemphasis=0.0, preemphasis_htk_flavor=True,
        fft_overdrive=False, dither=0.0, input_scale_factor=1.0, mel_floor=1e-3, padding_side="right")
    images = Gemma4ImageProcessor(patch_size=PATCH, max_soft_tokens=MAX_SOFT_TOKENS, pooling_kernel_size=POOL)
    processor = Gemma4Processor(feature_extractor=features, image_processor=images, tokenizer=tokenizer,
                                video_processor=Gemma4VideoProcessor(), chat_template=CHAT_TEMPLATE,
                                image_seq_length=MAX_SOFT_TOKENS, audio_seq_length=MAX_AUDIO_TOKENS,
                                audio_ms_per_token=40)
    vocab = padded_vocab_size(tokenizer)
    text = dict(
        **LM_SIZES, head_dim=LM_HEAD_DIM, global_head_dim=LM_HEAD_DIM, layer_types=["sliding_attention",
                                                                                   "full_attention"],
        sliding_window=512, vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size_per_layer_input=LM_HEAD_DIM,
        num_kv_shared_layers=0, use_double_wide_mlp=True, attention_k_eq_v=False, final_logit_softcapping=30.0,
        max_position_embeddings=131072, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
        rope_parameters={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1_000_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
        bos_token_id=token_id(tokenizer, "<bos>"), eos_token_id=token_id(tokenizer, "<eos>"),
        pad_token_id=token_id(tokenizer, "<pad>"),
    )
    vision = dict(**VISION_SIZES, num_key_value_heads=VISION_SIZES["num_attention_heads"], head_dim=64,
                  patch_size=PATCH, pooling_kernel_size=POOL, position_embedding_size=10 * 1024,
                  use_clipped_linears=True, standardize=False, default_output_length=MAX_SOFT_TOKENS)
    audio = dict(hidden_size=LM_HIDDEN, num_hidden_layers=2, num_attention_heads=2, subsampling_conv_channels=[128, 32],
                 conv_kernel_size=5, attention_chunk_size=12, attention_context_left=13, attention_context_right=0,
                 residual_weight=0.5, use_clipped_linears=True, output_proj_dims=LM_HIDDEN)
    config = Gemma4Config(
        text_config=text, vision_config=vision, audio_config=audio,
        **{field: token_id(tokenizer, token) for field, token in TOKEN_FIELDS.items()},
        eos_token_id=[token_id(tokenizer, "<eos>"), token_id(tokenizer, "<turn|>")],
    )
    config.architectures = ["Gemma4ForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
