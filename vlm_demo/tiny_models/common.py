"""Shared pieces of the tiny offline models: their sizes, the token sets several families share, a byte-level
tokenizer and a stable JSON writer.

Every tiny model is a directory with config, tokenizer, processor config and chat template only;
vLLM gives it random weights (``load_format="dummy"``). Building one needs no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

#: Hidden sizes of the tiny language models (head size 64 works on vLLM's CPU attention backend).
LM_HIDDEN = 128
LM_HEADS = 2
LM_KV_HEADS = 1
LM_LAYERS = 2
LM_INTERMEDIATE = 256
LM_HEAD_DIM = LM_HIDDEN // LM_HEADS
#: The same as transformers' language-model configs name them (``Qwen2Config(**LM_SIZES, ...)``).
LM_SIZES: dict[str, int] = {
    "hidden_size": LM_HIDDEN, "intermediate_size": LM_INTERMEDIATE, "num_hidden_layers": LM_LAYERS,
    "num_attention_heads": LM_HEADS, "num_key_value_heads": LM_KV_HEADS,
}

#: Sizes of the tiny vision towers (head size 64; each family keeps its real image size and patch size).
VISION_HIDDEN = 128
VISION_INTERMEDIATE = 256
VISION_HEADS = 2
VISION_LAYERS = 2
#: The same as ViT-style vision configs name them (CLIP, SigLIP, InternViT, AIMv2, ...).
VISION_SIZES: dict[str, int] = {
    "hidden_size": VISION_HIDDEN, "intermediate_size": VISION_INTERMEDIATE, "num_hidden_layers": VISION_LAYERS,
    "num_attention_heads": VISION_HEADS,
}

#: CLIP's image normalisation (OpenAI's mean and std), which several families' processors keep.
CLIP_NORMALIZE: dict[str, list[float]] = {
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
}

#: The special added tokens of Qwen2 / Qwen2.5 tokenizers (ids 151643-151656 in the real vocabulary).
QWEN2_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

#: The non-special added tokens that follow them in Qwen2.5 tokenizers (ids 151657-151664): 22 in all.
QWEN2_5_ADDED_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]

#: Qwen3's added tokens after the Qwen2 special ones (ids 151657-151668 in the real vocabulary), all
#: ``special: false`` in the checkpoints' tokenizers: Qwen2.5's eight, then tool responses and thinking.
QWEN3_PLAIN_TOKENS = [*QWEN2_5_ADDED_TOKENS, "<tool_response>", "</tool_response>", "<think>", "</think>"]

#: The Qwen-VL configs' token fields (Qwen2-VL and Qwen2.5-VL also name ``vision_token_id``: ``<|vision_pad|>``).
QWEN_VL_TOKEN_FIELDS = {
    "image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
}

#: InternVL's special tokens (after its language model's; ids 151665-151673 with Qwen2.5's vocabulary).
INTERNVL_TOKENS = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (the byte-level BPE alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + n))
            n += 1
    return dict(enumerate(chars))


def _byte_vocab() -> dict[str, int]:
    """The 256 byte symbols as ids 0-255, in byte order."""
    table = _bytes_to_unicode()
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    return {ch: b for b, ch in table.items()}


def build_tokenizer(
    special_tokens: list[str],
    *,
    bos: str | None,
    eos: str,
    pad: str | None = None,
    unk: str | None = None,
    chat_template: str | None = None,
    extra: dict[str, Any] | None = None,
    added_tokens: list[str] | None = None,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with no merges: ids 0-255 are bytes, then ``special_tokens``, then
    ``added_tokens`` (added to the vocabulary but not special, as in the real tokenizer)."""
    tok = Tokenizer(BPE(vocab=_byte_vocab(), merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(special_tokens)
    if added_tokens:
        tok.add_tokens(added_tokens)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad or eos,
        unk_token=unk,
        **(extra or {}),
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    """The id of one special token (fails loudly if the tokenizer lacks it)."""
    ids = tokenizer.convert_tokens_to_ids([token])
    assert ids[0] is not None and ids[0] != tokenizer.unk_token_id, token
    return ids[0]


def token_ids(tokenizer: PreTrainedTokenizerFast, fields: Mapping[str, str]) -> dict[str, int]:
    """Config fields naming a token -> that token's id (``{"image_token_id": "<|image_pad|>"}``)."""
    return {field: token_id(tokenizer, token) for field, token in fields.items()}


def padded_vocab_size(tokenizer: PreTrainedTokenizerFast, multiple: int = 64) -> int:
    """Embedding rows for ``tokenizer``, rounded up like real checkpoints do."""
    n = len(tokenizer)
    return (n + multiple - 1) // multiple * multiple


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as stable, sorted JSON (so builds are byte-for-byte deterministic)."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
