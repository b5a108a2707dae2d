"""The Qwen2.5-Omni thinker (``Qwen/Qwen2.5-Omni-7B``): pictures, videos and clips in one message, text out.

vLLM 0.32 serves the checkpoint's architectures (``Qwen2_5OmniModel``, ``Qwen2_5OmniForConditionalGeneration``) with
its thinker alone (``Qwen2_5OmniThinkerForConditionalGeneration``: the talker and token2wav weights are skipped). The
vision side is Qwen2.5-VL's (14-px patches, 2x2 merge: one token per 28x28 px; ``qwen_grid``; a video's frames are
picked by rate, 2 a second unless asked, ``num_frames`` ignored); the audio side is Qwen2-Audio's Whisper-style encoder
(128 mel bins, 16 kHz, hop 160; a stride-2 convolution and a stride-2 pooling: 25 tokens a second) run over 2-s
windows (``n_window`` 100). Its extractor's window is 300 s (``chunk_length`` 300, ``n_samples`` 4,800,000;
Qwen2-Audio's is 30), and vLLM 0.32 cuts no clip at all: its processor calls transformers' with ``truncation=False``
(meant for the text; Qwen2-Audio's sets it back to True, Omni's does not), so 310 s gives 7750 tokens in vLLM where
transformers alone gives 7500 (measured with the tiny model).

The chat template writes ``<|vision_bos|><|IMAGE|><|vision_eos|>``, ``<|vision_bos|><|VIDEO|><|vision_eos|>`` and
``<|audio_bos|><|AUDIO|><|audio_eos|>``; each ``<|IMAGE|>``, ``<|VIDEO|>`` and ``<|AUDIO|>`` becomes one per token
(vLLM's own placeholder strings say ``<|vision_start|>``/``<|vision_end|>``, tokens this tokenizer lacks: the
template's are used). With ``use_audio_in_video`` a video's own sound goes inside its markers: ``<|audio_bos|>``, then
per 2 s (50 position ids at 25 a second; a temporal patch of frames counts as 1 s whatever the sampling rate, as
transformers' processor assumes 2 fps) that chunk's frame tokens and its (at most 50) audio tokens, the rest of the
sound after the last chunk, then ``<|audio_eos|>`` (vLLM's ``omni_get_updates_use_audio_in_video``).

Sources: the checkpoint's config.json and preprocessor_config.json (as copied by derivative checkpoints; see
``vlm_demo/tiny_models/qwen2_5_omni.py``), vLLM 0.32's ``qwen2_5_omni_thinker.py`` and ``registry.py``, transformers
5.19's ``Qwen2_5OmniProcessor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, Control, GeometryFn, ItemGeometry, KnownCount
from .qwen2_audio import HOP, RATE, clip_geometry, from_frames
from .qwen_grid import SIZE_ALIASES, count_rule, geometry, pixel_controls, video_geometry, video_pixel_controls

#: preprocessor_config.json's bounds on a picture's resized area (Qwen2VLImageProcessor).
MIN_PIXELS, MAX_PIXELS = 3136, 12845056
#: The processor's defaults for each video frame's area (``Qwen2_5OmniProcessorKwargs``: 128 and 768 cells).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28
CAP_S = 300.0
"""preprocessor_config.json's ``chunk_length`` (``n_samples`` 4,800,000 at 16 kHz): the Whisper extractor pads every
clip to it (the encoder sees only the valid frames, ``feature_attention_mask``). It truncates there only when asked:
transformers' processor does, vLLM 0.32's does not (no cap; the app's own limit is ``Settings.max_audio_seconds``)."""
AUDIO_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN = "<|AUDIO|>", "<|IMAGE|>", "<|VIDEO|>"


def tokens_for(seconds: float, rate: int = RATE) -> int:
    """vLLM's count for a clip of ``seconds``, all of it (no cap there): 100 mel frames a second, then the audio
    encoder's two stride-2 steps (as Qwen2-Audio's)."""
    return from_frames(int(seconds * rate) // HOP)


def _thinker(rule: GeometryFn) -> GeometryFn:
    """``rule`` given the thinker's config (vLLM's ``hf_config`` is the whole Omni config: the vision config is
    ``thinker_config.vision_config``)."""
    def on_thinker(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
        return rule(fields, image, getattr(hf_config, "thinker_config", hf_config), mm_kwargs)
    return on_thinker


RULE = ("25 tokens a second: 100 mel frames a second (16 kHz, hop 160), two stride-2 steps; "
        "no cut in vLLM (transformers alone stops at 300 s)")

ADAPTER = Adapter(
    name="qwen2_5_omni", title="Qwen2.5-Omni (thinker)", model_types=("qwen2_5_omni",),
    feature_tokens={"image": IMAGE_TOKEN, "video": VIDEO_TOKEN, "audio": AUDIO_TOKEN},
    placeholders={"image": "<|vision_bos|><|IMAGE|><|vision_eos|>", "video": "<|vision_bos|><|VIDEO|><|vision_eos|>",
                  "audio": "<|audio_bos|><|AUDIO|><|audio_eos|>"},
    aliases=SIZE_ALIASES,
    controls=(*pixel_controls(28, MAX_PIXELS, (MIN_PIXELS, MAX_PIXELS)),
              # per video frame only (the unscoped pair above applies to pictures and frames alike)
              *video_pixel_controls(28, MAX_PIXELS, (VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS)),
              # a video's own sound, heard beside its frames (interleaved per 2 s); the processor's default: off
              Control("use_audio_in_video", kind="bool", default=False)),
    geometry={"image": _thinker(geometry), "video": _thinker(video_geometry), "audio": clip_geometry},
    geometry_from_count={"image": count_rule(MIN_PIXELS, MAX_PIXELS, 28)}, video_sampling="fps",
    rules={"audio": RULE},
    known_counts={
        "image": (
            KnownCount((640, 480), 391, "smart_resize(480, 640, factor 28) = 476x644 -> 17x23 cells "
                       "(preprocessor_config.json: patch 14, merge 2, min_pixels 3136, max_pixels 12845056)"),
            KnownCount((640, 480), 117, "max_pixels 100352 (128x28x28): 364x252 -> 9x13 cells",
                       {"max_pixels": 100352}),
        ),
        "audio": (
            KnownCount(3.0, 75, "3 s at 16 kHz = 300 mel frames (hop 160) -> 150 after the stride-2 conv -> 75 after "
                       "the stride-2 pooling (preprocessor_config.json: WhisperFeatureExtractor, 128 bins, hop 160)"),
            KnownCount(45.0, 1125, "no 30-s cut (chunk_length 300, n_samples 4,800,000; vLLM cuts none): 45 s = "
                       "4500 mel frames -> 2250 -> 1125, all heard (Qwen2-Audio, chunk_length 30: 750)"),
        ),
    },
)
