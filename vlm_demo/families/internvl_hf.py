"""HF-format InternVL (``OpenGVLab/InternVL3_5-1B-HF``, ``internvl``): 448 px tiles, 256 tokens each.

With ``crop_to_patches`` (on by default) the image is cut into the grid of 448-px tiles (min_patches to
max_patches of them) closest to its aspect ratio, plus a 448-px thumbnail when there is more than one tile;
``<IMG_CONTEXT>`` expands to ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``.

vLLM 0.32 runs the checkpoint as ``InternS1ForConditionalGeneration`` (``models/interns1.py``) with
transformers' ``InternVLProcessor`` (``GotOcr2ImageProcessor``: the tiling, and ``InternVLProcessor``'s
default ``crop_to_patches=True``, which wins over the checkpoint's ``preprocessor_config.json`` value
``false``). vLLM sizes its encoder cache from that config value (256 tokens an image) unless the engine
starts with ``crop_to_patches=True``, hence the control sizes the cache. The tokenizer is Qwen3's plus
InternVL's tokens and ``<video>``; the processor reads the named ones (``start_image_token`` ...) from
``extra_special_tokens`` in tokenizer_config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image
from tokenizers import AddedToken

from transformers import (
    GotOcr2ImageProcessor,
    InternVLConfig,
    InternVLProcessor,
    InternVLVideoProcessor,
    Qwen3Config,
)

from . import grounding
from .base import Adapter, Control, ItemGeometry, KnownCount
from ..tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
    QWEN2_SPECIAL_TOKENS,
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

#: Qwen3's added tokens after the Qwen2 special ones (ids 151657-151668), ``special: false``.
QWEN3_PLAIN_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]

#: InternVL's special tokens (ids 151669-151677) and the HF conversion's ``<video>`` (151678).
INTERNVL_TOKENS = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>",
                   "<video>"]

#: The named tokens InternVLProcessor reads from the tokenizer (tokenizer_config.json extra_special_tokens).
NAMED_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>"}

#: preprocessor_config.json of the checkpoint: 448-px tiles, 1-12 of them, ImageNet normalisation.
TILE, TOKENS_PER_TILE, MIN_PATCHES, MAX_PATCHES = 448, 256, 1, 12
IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])


def build(out: Path) -> None:
    """Write a tiny InternVL3.5-1B-HF-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(QWEN2_SPECIAL_TOKENS, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                                chat_template=CHAT_TEMPLATE, added_tokens=QWEN3_PLAIN_TOKENS,
                                extra={"model_max_length": 8192, "extra_special_tokens": NAMED_TOKENS})
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in INTERNVL_TOKENS],
                         special_tokens=True)  # the four named ones are in already, so <video> comes before <quad>
    image_processor = GotOcr2ImageProcessor(size={"height": TILE, "width": TILE}, crop_to_patches=False,
                                            min_patches=MIN_PATCHES, max_patches=MAX_PATCHES, **IMAGENET)
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                  video_processor=InternVLVideoProcessor(), image_seq_length=TOKENS_PER_TILE,
                                  chat_template=CHAT_TEMPLATE)
    config = InternVLConfig(
        text_config=Qwen3Config(
            hidden_size=LM_HIDDEN, intermediate_size=LM_INTERMEDIATE, num_hidden_layers=LM_LAYERS,
            num_attention_heads=LM_HEADS, num_key_value_heads=LM_KV_HEADS, head_dim=LM_HIDDEN // LM_HEADS,
            vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=40960,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-6,
            tie_word_embeddings=False, bos_token_id=token_id(tokenizer, "<|endoftext|>"),
            eos_token_id=token_id(tokenizer, "<|im_end|>"), architectures=["Qwen3ForCausalLM"],
        ).to_dict(),
        # InternViT-300M-448px geometry (448 px, patch 14; pixel shuffle 0.5 -> 256 tokens), tiny widths.
        vision_config=dict(
            hidden_size=128, intermediate_size=256, num_attention_heads=2, num_hidden_layers=2,
            image_size=[TILE, TILE], patch_size=[14, 14], attention_bias=True, use_qk_norm=False,
            norm_type="layer_norm", layer_norm_eps=1e-6, use_absolute_position_embeddings=True,
        ),
        image_token_id=token_id(tokenizer, "<IMG_CONTEXT>"), image_seq_length=TOKENS_PER_TILE,
        downsample_ratio=0.5, projector_hidden_act="gelu", tie_word_embeddings=False,
    )
    config.architectures = ["InternVLForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)


def tile_grid(width: int, height: int, min_patches: int, max_patches: int, tile: int = TILE) -> tuple[int, int]:
    """GotOcr2's ``get_optimal_tiled_canvas``: (columns, rows) of the tile grid for an image."""
    grids = sorted(((c, r) for c in range(1, max_patches + 1) for r in range(1, max_patches + 1)
                    if min_patches <= c * r <= max_patches), key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids:
        diff = abs(width / height - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * cols * rows:
            best = (cols, rows)
    return best


def tiling(image: Image.Image, mm_kwargs: Mapping[str, Any], tile: int = TILE) -> ItemGeometry:
    """What the processor does with ``image`` under the request's kwargs and the checkpoint's defaults."""
    if not mm_kwargs.get("crop_to_patches", True):
        return ItemGeometry(image.size, (tile, tile), (1, 1), False)
    cols, rows = tile_grid(*image.size, mm_kwargs.get("min_patches", MIN_PATCHES),
                           mm_kwargs.get("max_patches", MAX_PATCHES), tile)
    return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), cols * rows != 1)


def _patches(found: ItemGeometry) -> int:
    rows, cols = found.grid or (0, 0)
    return rows * cols + bool(found.thumbnail)


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tile grid, checked against the engine's own patch count (``image_num_patches``)."""
    if image is None:
        return None
    num_patches = int(fields["image_num_patches"])
    found = tiling(image, mm_kwargs, int(fields["pixel_values"].shape[-1]))
    if _patches(found) != num_patches:  # the engine's own count wins: only the thumbnail is certain
        return ItemGeometry(image.size, None, None, num_patches > 1)
    return found


def video_geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
                   mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """A video's frames: each sampled frame is one tile (resized to it, no thumbnail), one group of tokens
    in a square grid (pixel shuffle 0.5 of the patches)."""
    tile = int(fields["pixel_values_videos"].shape[-1])
    patch = hf_config.vision_config.patch_size
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    side = round(tile // patch * hf_config.downsample_ratio)
    return ItemGeometry(image.size if image else None, (tile, tile), (side, side), None)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule with the request's kwargs, if it gives the server's ``count``."""
    found = tiling(image, mm_kwargs)
    return found if _patches(found) * TOKENS_PER_TILE == count else None


ADAPTER = Adapter(
    name="internvl_hf", title="InternVL (HF format)", model_types=("internvl",),
    feature_tokens={"image": "<IMG_CONTEXT>"}, placeholders={"image": "<IMG_CONTEXT>"},
    markers={"image": ("<img>", "</img>")},
    controls=(Control("min_patches", label="min_patches (448 px tiles)", min=1, max=MAX_PATCHES, default=1),
              Control("max_patches", label="max_patches (448 px tiles)", min=1, max=MAX_PATCHES, sizes_cache=True, default=12),
              Control("crop_to_patches", label="crop_to_patches (tiles + thumbnail)", kind="bool", sizes_cache=True, default=True)),
    grounding=grounding.INTERNVL, geometry={"image": geometry, "video": video_geometry},
    geometry_from_count={"image": geometry_from_count}, build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 3328, "4:3 -> 4x3 tiles of 448 px + thumbnail = 13 x 256 (GotOcr2 tiling with "
                   "InternVLProcessor's crop_to_patches=True; preprocessor_config.json: size 448, "
                   "min_patches 1, max_patches 12; processor_config.json: image_seq_length 256)"),
        KnownCount((320, 320), 256, "1:1 -> 1x1 tile, no thumbnail = 1 x 256"),
        KnownCount((640, 480), 1792, "max_patches 6: 3x2 tiles + thumbnail = 7 x 256", {"max_patches": 6}),
        KnownCount((640, 480), 256, "crop_to_patches false: one 448-px resize = 1 x 256",
                   {"crop_to_patches": False}),
    )},
)
