"""Qwen2-Audio (``Qwen/Qwen2-Audio-7B-Instruct``): a model that listens, through a Whisper-style encoder.

A clip at 16 kHz becomes 128-bin log-mel frames of 160 samples (100 a second) in 30-s windows; the encoder's
stride-2 convolution and its stride-2 pooling make 4 frames one token: 25 tokens a second. vLLM's processor takes
one window a clip, so a clip longer than 30 s is cut there (750 tokens) with no word: the expansion says what was
heard. ``<|audio_bos|><|AUDIO|><|audio_eos|>`` expands to one ``<|AUDIO|>`` per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Adapter, ItemGeometry, KnownCount

RATE = 16_000
"""The feature extractor's sampling rate (preprocessor_config.json): the app resamples every clip to it."""
HOP = 160
"""Samples a mel frame advances (preprocessor_config.json ``hop_length``): 100 frames a second."""
CAP_S = 30.0
"""The extractor's window (``chunk_length``); vLLM's processor takes one window a clip."""
AUDIO_TOKEN = "<|AUDIO|>"


def tokens_for(seconds: float, rate: int = RATE) -> int:
    """The checkpoint's count for a clip of ``seconds`` (its first 30 s): mel frames, then the encoder's two
    stride-2 steps (``Qwen2AudioEncoder._get_feat_extract_output_lengths``)."""
    return from_frames(min(int(seconds * rate), int(CAP_S * rate)) // HOP)


def from_frames(frames: int) -> int:
    """Tokens of ``frames`` mel frames: the encoder's stride-2 convolution, then its stride-2 pooling
    (``_get_feat_extract_output_lengths``; the Qwen2.5-Omni thinker's audio encoder counts the same)."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def clip_geometry(fields: Mapping[str, Any], _source: Any, _hf_config: Any, _kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The frames the model takes from the processor's mask (its valid frames, after the 30-s cut)."""
    frames = int(fields["feature_attention_mask"].sum())
    return ItemGeometry(None, None, None, None, feature_frames=frames, heard_s=frames * HOP / RATE)


def clip_from_count(count: int, clip: Any, _kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The frames a remote server's count implies for a clip of its length (sent at 16 kHz); None where the count
    is not the rule's (never a guess)."""
    heard = min(clip.seconds, CAP_S)
    if tokens_for(heard) != count:
        return None
    frames = int(heard * RATE) // HOP
    return ItemGeometry(None, None, None, None, feature_frames=frames, heard_s=frames * HOP / RATE)


RULE = "25 tokens a second: 100 mel frames a second (16 kHz, hop 160), two stride-2 steps; 30 s at most"

ADAPTER = Adapter(
    name="qwen2_audio", title="Qwen2-Audio", model_types=("qwen2_audio",), feature_tokens={"audio": AUDIO_TOKEN},
    placeholders={"audio": "<|audio_bos|><|AUDIO|><|audio_eos|>"}, geometry={"audio": clip_geometry},
    geometry_from_count={"audio": clip_from_count},
    rules={"audio": RULE},
    known_counts={"audio": (
        KnownCount(3.0, 75, "3 s at 16 kHz = 300 mel frames (hop 160) -> 150 after the stride-2 conv -> 75 after "
                   "the stride-2 pooling (preprocessor_config.json: WhisperFeatureExtractor, 128 bins, hop 160)"),
        KnownCount(45.0, 750, "one 30-s window a clip (chunk_length 30): 3000 frames -> 750; the last 15 s unheard"),
    )},
)
