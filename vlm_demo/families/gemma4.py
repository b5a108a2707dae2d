"""Gemma 4 E2B (``google/gemma-4-E2B-it``): pictures and clips in one message, through a ViT with 3x3 pooling and a
Conformer audio tower (USM-style), into a Gemma 4 language model with per-layer embeddings.

Pictures: ``Gemma4ImageProcessor`` resizes a picture, aspect kept, to the largest size whose sides are multiples of
48 px (16-px patches, 3x3 pooling) within ``max_soft_tokens`` x 9 patches (280 by default: 2520 patches); each 48x48
cell is one ``<|image|>`` token, so a 640x480 picture is 912x672 px = 19x14 cells = 266 tokens. vLLM expands the
template's ``<|image|>`` to ``<|image>`` + one ``<|image|>`` per cell + ``<image|>``.

Clips: ``Gemma4AudioFeatureExtractor`` at 16 kHz makes 128-bin log-mel frames of 320 samples every 160 (a
"semicausal" 160-sample lead-in: ``(samples - 161) // 160 + 1`` frames, masked to the real samples); the tower's two
stride-2 convolutions (kernel 3, padding 1) make 4 frames one ``<|audio|>`` token: 25 tokens a second, 750 at most
(``audio_seq_length``). vLLM expands ``<|audio|>`` to ``<|audio>`` + the tokens + ``<audio|>``, counted from the
clip's samples and capped at 750 with only a log line ("Audio duration exceeds max"). transformers alone cuts the clip
itself at 480,000 samples (30 s: the extractor's ``max_length``); vLLM 0.32 does not (its processor call turns
``truncation`` off): a 45-s clip's item holds all 4499 frames, the tower encodes them all, and the engine keeps the
first 750 outputs, as many as the prompt's placeholders (``gpu_model_runner._gather_mm_embeddings`` slices the encoder
output by the placeholder's range): the first 30 s are heard, the rest is computed and dropped.

Confirmed here: the rules above from transformers 5.19's ``processing_gemma4.py`` / ``feature_extraction_gemma4.py`` /
``image_processing_gemma4.py`` and vLLM 0.32's ``gemma4_mm.py`` (``_compute_audio_num_tokens``,
``_compute_num_soft_tokens``, ``_apply_hf_processor_main``: the item's ``input_features_mask`` holds the valid frames
after the cut, unpadded), measured on the tiny model against transformers' own processor (``tests/test_gemma4.py``).
Not confirmed from the checkpoint's own files (no stored copy of them was found; second-hand copies agree): the
processor_config.json values (``image_seq_length`` 280, ``audio_seq_length`` 750, ``audio_ms_per_token`` 40, the
extractor's settings: transformers' defaults) and the tokens' spellings (``vlm_demo/tiny_models/gemma4.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .base import Adapter, ItemGeometry, KnownCount

RATE = 16_000
"""The feature extractor's sampling rate: the app resamples every clip to it."""
HOP = 160
"""Samples a mel frame advances (10 ms)."""
FRAME = 320
"""Samples a mel frame spans (20 ms); the extractor leads in with ``FRAME // 2`` zeros."""
CAP_SAMPLES = 480_000
"""The extractor's ``max_length`` (truncation on): the first 30 s of a clip are heard."""
MAX_AUDIO_TOKENS = 750
"""The processor's ``audio_seq_length``: the most tokens a clip becomes (30 s at 25 a second)."""
PATCH, POOL = 16, 3
"""The vision tower's patch size and the pooling kernel: one token per 48x48-px cell."""
MAX_SOFT_TOKENS = 280
"""The image processor's ``max_soft_tokens`` (vLLM also takes 70, 140, 560 and 1120 per request)."""
IMAGE_TOKEN, AUDIO_TOKEN = "<|image|>", "<|audio|>"
"""The feature tokens, also the placeholders the chat template writes."""


def _frames(samples: int) -> int:
    """Mel frames of ``samples`` samples (the extractor's semicausal framing; its mask keeps exactly these)."""
    return max(0, (samples + FRAME // 2 - (FRAME + 1)) // HOP + 1)


def from_frames(frames: int) -> int:
    """Tokens of ``frames`` mel frames: the tower's two stride-2 convolutions (kernel 3, padding 1), at most 750."""
    for _ in range(2):
        frames = (frames + 2 - 3) // 2 + 1
    return min(frames, MAX_AUDIO_TOKENS)


def tokens_for(seconds: float, rate: int = RATE) -> int:
    """vLLM's count for a clip of ``seconds`` (``Gemma4ProcessingInfo._compute_audio_num_tokens``)."""
    return from_frames(_frames(int(seconds * rate)))


def _heard(frames: int) -> ItemGeometry:
    """A clip whose features are ``frames`` mel frames: the samples they stand for, to the 10 ms (the frames cover
    all but the last 1-160 samples the extractor took: ``frames = (samples - 161) // 160 + 1``)."""
    return ItemGeometry(None, None, None, None, feature_frames=frames, heard_s=(frames + 1) * HOP / RATE)


def clip_geometry(fields: Mapping[str, Any], _source: Any, _hf_config: Any, _kwargs: Mapping[str, Any]) -> ItemGeometry:
    """The frames heard: the item's valid frames (vLLM unpads each clip's features to them), up to the 30-s cap (the
    prompt holds 750 tokens at most; vLLM 0.32 encodes a longer clip whole and drops what the prompt has no place
    for)."""
    return _heard(min(int(fields["input_features_mask"].sum()), _frames(CAP_SAMPLES)))


def clip_from_count(count: int, clip: Any, _kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The frames a remote server's count implies for a clip of its length (sent at 16 kHz); None where the count is
    not the rule's."""
    samples = min(int(clip.seconds * RATE), CAP_SAMPLES)
    frames = _frames(samples)
    return _heard(frames) if from_frames(frames) == count else None


def target_size(width: int, height: int, max_soft_tokens: int = MAX_SOFT_TOKENS) -> tuple[int, int]:
    """The picture's size after resizing (``get_aspect_ratio_preserving_size``): the largest multiples of 48 px,
    aspect kept, within ``max_soft_tokens`` x 9 patches of 16 px."""
    unit = PATCH * POOL
    scale = math.sqrt(max_soft_tokens * POOL**2 * PATCH**2 / (width * height))
    return (max(unit, int(math.floor(width * scale / unit)) * unit),
            max(unit, int(math.floor(height * scale / unit)) * unit))


def image_geometry(fields: Mapping[str, Any], image: Image.Image | None, _hf_config: Any,
                   _kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The cells from the engine's own patch positions (``pixel_position_ids``: x, y per 16-px patch, -1 for the
    padding up to the budget): columns and rows of 48-px cells."""
    positions = fields["pixel_position_ids"]
    valid = positions[(positions >= 0).all(-1)]
    if image is None or not len(valid):
        return None
    cols, rows = (int(valid[:, 0].max()) + 1, int(valid[:, 1].max()) + 1)
    if cols % POOL or rows % POOL:
        return None
    return ItemGeometry(image.size, (cols * PATCH, rows * PATCH), (rows // POOL, cols // POOL), None)


def image_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The resize rule at the request's ``max_soft_tokens`` (the checkpoint's 280 unless sent), if it gives
    ``count``."""
    budget = mm_kwargs.get("max_soft_tokens") or MAX_SOFT_TOKENS
    width, height = target_size(*image.size, budget)
    rows, cols = height // (PATCH * POOL), width // (PATCH * POOL)
    if min(rows * cols, budget) != count:
        return None
    return ItemGeometry(image.size, (width, height), (rows, cols), None)


RULE = ("25 tokens a second: 100 mel frames a second (16 kHz, hop 160), two stride-2 convolutions; "
        "30 s at most (750 tokens), the rest cut with only a log line")

ADAPTER = Adapter(
    name="gemma4", title="Gemma 4 (E2B)", model_types=("gemma4",), architectures=("Gemma4ForConditionalGeneration",),
    feature_tokens={"image": IMAGE_TOKEN, "audio": AUDIO_TOKEN},
    placeholders={"image": IMAGE_TOKEN, "audio": AUDIO_TOKEN},
    markers={"image": ("<|image>", "<image|>"), "audio": ("<|audio>", "<audio|>")},
    geometry={"image": image_geometry, "audio": clip_geometry},
    geometry_from_count={"image": image_from_count, "audio": clip_from_count},
    rules={"audio": RULE},
    # (vLLM takes max_soft_tokens per request, but only 70, 140, 280, 560 or 1120: a slider derived from the processor
    # offered 70..560 and refused most of it; the pictures go at the checkpoint's 280 until a choice control exists)
    fixed_geometry="at most 280 tokens a picture (max_soft_tokens 280, the checkpoint's: 48-px cells)",
    known_counts={
        "image": (
            KnownCount((640, 480), 266, "max_soft_tokens 280 -> at most 2520 16-px patches: scale sqrt(2520 x 256 / "
                       "(640 x 480)) = 1.449 -> 927x696 -> multiples of 48 px: 912x672 = 19x14 cells of 3x3 patches"),
        ),
        "audio": (
            KnownCount(3.0, 75, "3 s at 16 kHz = 48,000 samples -> (48,000 - 161) // 160 + 1 = 299 mel frames -> 150 "
                       "-> 75 after the two stride-2 convolutions (Gemma4AudioFeatureExtractor: 128 bins, hop 160)"),
            KnownCount(45.0, 750, "audio_seq_length 750 (30 s at 40 ms a token): vLLM counts 45 s (4499 frames -> "
                       "1125) and caps it at 750 with a log line; transformers cuts at 480,000 samples (2999 frames -> "
                       "1500 -> 750); the last 15 s unheard"),
        ),
    },
)
