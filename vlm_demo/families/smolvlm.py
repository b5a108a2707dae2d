"""SmolVLM2 (``HuggingFaceTB/SmolVLM2-2.2B-Instruct``) and Idefics3: the long side to 1536, cut into 384-px tiles
of 81 tokens; ``<image>`` -> per tile ``<fake_token_around_image><row_i_col_j><image>*81``, then the global view.

In full: rows of tiles (each row ends with a newline), then
``\\n<fake_token_around_image><global-img><image>*81<fake_token_around_image>`` for the whole image squashed to
384x384; a one-tile canvas (or ``do_image_splitting=False``) gives only that last block. vLLM 0.32 runs
Idefics3 (``HuggingFaceM4/Idefics3-8B-Llama3``: 364-px tiles of 169 tokens) through the same processor and
rule, so both model types belong here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from .base import Adapter, Control, ItemGeometry, KnownCount
from ..tiny_models.common import (
    LM_HEADS,
    LM_HIDDEN,
    LM_INTERMEDIATE,
    LM_KV_HEADS,
    LM_LAYERS,
    build_tokenizer,
    padded_vocab_size,
    token_id,
    write_json,
)

# The chat template of HuggingFaceTB/SmolVLM2-2.2B-Instruct (the SmolVLM one: no system prompt, role
# names capitalized, ":" with no space before a leading image). Content format "openai": each image part
# renders as "<image>". transformers swaps in a variant with a '<video>' branch only for video input.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

#: The tokenizer's special tokens, in id order: SmolLM2's 17 (ids 0-16), then the 128 SmolVLM adds
#: (ids 49152-49279: ``<global-img>``, the 36 ``<row_i_col_j>``, ``<fake_token_around_image>``,
#: ``<image>``, 88 reserved tokens, ``<end_of_utterance>``).
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>",
    "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
    "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
    "<global-img>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    "<fake_token_around_image>", "<image>", *(f"<|reserved_special_token_{i}|>" for i in range(88)),
    "<end_of_utterance>",
]

#: The tokenizer's named media tokens (tokenizer_config.json ``extra_special_tokens``).
MEDIA_TOKENS = {
    "fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
    "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
}

#: The checkpoint's preprocessor_config.json (SmolVLMImageProcessor).
PREPROCESSOR_CONFIG = {
    "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "SmolVLMImageProcessor", "max_image_size": {"longest_edge": 384},
    "processor_class": "SmolVLMProcessor", "resample": 1, "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 1536},
    "video_sampling": {"fps": 1, "max_frames": 64, "video_size": {"longest_edge": 384}},
}


@dataclass(frozen=True)
class Tiling:
    """The image-processor settings and tokens per tile of one checkpoint."""

    longest_edge: int
    """``size.longest_edge``: the long side the image is resized to before tiling."""
    tile: int
    """``max_image_size.longest_edge``: the tile side (the vision encoder's input size)."""
    tokens: int
    """``image_seq_len``: ``<image>`` tokens per tile, ((tile / patch) / scale_factor)^2."""


#: SmolVLM2-2.2B (the checkpoint this adapter stands for), SmolVLM2-256M/500M, Idefics3-8B. A remote
#: server's count is matched against each; the token counts per tile exclude any coincidence.
TILINGS = (Tiling(1536, 384, 81), Tiling(2048, 512, 64), Tiling(1456, 364, 169))


def _resized(width: int, height: int, longest_edge: int) -> tuple[int, int]:
    """The processor's first resize: the long side to ``longest_edge`` (even short side), capped at 4096."""
    if width >= height:
        new_w, new_h = longest_edge, int(longest_edge / (width / height))
        new_h += new_h % 2
    else:
        new_w, new_h = int(longest_edge * (width / height)), longest_edge
        new_w += new_w % 2
    if max(new_w, new_h) > 4096:
        if new_w >= new_h:
            new_w, new_h = 4096, int(4096 / (new_w / new_h))
        else:
            new_w, new_h = int(4096 * (new_w / new_h)), 4096
    return max(new_w, 1), max(new_h, 1)


def tile_grid(width: int, height: int, longest_edge: int, tile: int) -> tuple[int, int] | None:
    """Rows and columns of tiles the processor cuts an image into; (0, 0) when it stays one tile.

    vLLM counts tokens with transformers' ``get_number_of_image_patches`` while the pixels are tiled by
    ``resize_for_vision_encoder``; the two agree when ``longest_edge`` is a multiple of ``tile`` (as in
    every checkpoint). None when they do not: vLLM then cuts the pixel tiles to its own count.
    """
    w, h = _resized(width, height, longest_edge)
    counted = (math.ceil(h / tile), math.ceil(w / tile))
    if w >= h:  # resize_for_vision_encoder: one side up to whole tiles, the other from the aspect ratio
        cols = math.ceil(w / tile)
        rows = math.ceil(int(cols * tile / (w / h)) / tile)
    else:
        rows = math.ceil(h / tile)
        cols = math.ceil(int(rows * tile * (w / h)) / tile)
    if (rows, cols) != counted:
        return None
    return (rows, cols) if rows > 1 or cols > 1 else (0, 0)


def _edge(value: Any, default: int) -> int:
    """``longest_edge`` of a size dict (a request kwarg or a config value), else ``default``."""
    if isinstance(value, Mapping) and "longest_edge" in value:
        return int(value["longest_edge"])
    return default


def geometry(fields: Mapping[str, Any], image: Image.Image | None, hf_config: Any,
             mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """Tiles from ``num_patches`` and the tile side from ``pixel_values``; the grid from the tiling rule,
    kept only when it gives the processor's tile count."""
    tiles = int(fields["num_patches"])
    tile = int(fields["pixel_values"].shape[-1])
    orig = image.size if image is not None else None
    if tiles == 1:  # one view: the pixel mask says how much of the tile it fills
        mask = fields["pixel_attention_mask"][0]
        return ItemGeometry(orig, (int(mask.any(0).sum()), int(mask.any(1).sum())), None, False)
    if image is None:
        return ItemGeometry(None, None, None, True)
    config_size = getattr(getattr(hf_config, "vision_config", None), "size", None)
    longest = _edge(mm_kwargs.get("size"), _edge(config_size, 4 * tile))
    grid = tile_grid(*image.size, longest, tile)
    if grid is None or grid[0] * grid[1] + 1 != tiles:
        return ItemGeometry(orig, None, None, True)
    return ItemGeometry(orig, (grid[1] * tile, grid[0] * tile), grid, True)


def geometry_from_count(count: int, image: Image.Image, mm_kwargs: Mapping[str, Any]) -> ItemGeometry | None:
    """The tiling rule for each known checkpoint's settings (a request's ``size`` / ``do_image_splitting``
    applied); shown only when one of them gives the server's count."""
    for preset in TILINGS:
        tile = preset.tile
        grid = (tile_grid(*image.size, _edge(mm_kwargs.get("size"), preset.longest_edge), tile)
                if mm_kwargs.get("do_image_splitting", True) else (0, 0))
        if grid is None or (grid[0] * grid[1] + 1) * preset.tokens != count:
            continue
        rows, cols = grid
        if rows:
            return ItemGeometry(image.size, (cols * tile, rows * tile), (rows, cols), True)
        return ItemGeometry(image.size, (tile, tile), None, False)  # one view, stretched to the tile
    return None


def build(out: Path) -> None:
    """Write a tiny SmolVLM2-2.2B-Instruct-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos="<|im_start|>", eos="<end_of_utterance>", pad="<|im_end|>",
                                unk="<|endoftext|>", chat_template=CHAT_TEMPLATE,
                                extra={"extra_special_tokens": MEDIA_TOKENS})
    vocab = padded_vocab_size(tokenizer)
    config = {
        "architectures": ["SmolVLMForConditionalGeneration"],
        "model_type": "smolvlm",
        "image_token_id": token_id(tokenizer, "<image>"),
        "pad_token_id": token_id(tokenizer, "<|im_end|>"),
        "scale_factor": 3,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "dtype": "bfloat16",
        "text_config": {
            "architectures": ["VLlama3ForCausalLM"], "model_type": "llama", "hidden_size": LM_HIDDEN,
            "intermediate_size": LM_INTERMEDIATE, "num_hidden_layers": LM_LAYERS,
            "num_attention_heads": LM_HEADS, "num_key_value_heads": LM_KV_HEADS,
            "head_dim": LM_HIDDEN // LM_HEADS, "max_position_embeddings": 16384, "rms_norm_eps": 1e-05,
            "rope_theta": 273768.0, "vocab_size": vocab, "tie_word_embeddings": False,
            "bos_token_id": token_id(tokenizer, "<|im_start|>"),
            "eos_token_id": token_id(tokenizer, "<end_of_utterance>"),
            "pad_token_id": token_id(tokenizer, "<|im_end|>"),
        },
        # The real tower: 1152 wide, 27 layers, 16 heads; the tile geometry is kept (384 px, patch 14).
        "vision_config": {
            "model_type": "smolvlm_vision", "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 384, "patch_size": 14,
            "max_image_size": {"longest_edge": 384}, "size": {"longest_edge": 1536},
        },
    }
    write_json(out / "config.json", config)
    write_json(out / "preprocessor_config.json", PREPROCESSOR_CONFIG)
    write_json(out / "processor_config.json", {"image_seq_len": 81, "processor_class": "SmolVLMProcessor"})
    tokenizer.save_pretrained(out)


ADAPTER = Adapter(
    name="smolvlm", title="SmolVLM2 / Idefics3", model_types=("smolvlm", "idefics3"),
    feature_tokens={"image": "<image>"}, placeholders={"image": "<image>"},
    controls=(Control("do_image_splitting", label="do_image_splitting (384 px tiles + global view)", kind="bool", default=True),),
    ranges_from_ids=False,  # an image's range holds one <image> run per tile, with row tokens between
    geometry={"image": geometry}, geometry_from_count={"image": geometry_from_count}, build_tiny=build,
    known_counts={"image": (
        KnownCount((640, 480), 1053, "640x480 -> 1536x1152 (size.longest_edge 1536) -> 3x4 tiles of 384 "
                   "(max_image_size 384) + global = 13 x 81 (image_seq_len; 384/14=27 patches, pixel shuffle 3)"),
        KnownCount((320, 320), 1377, "320x320 -> 1536x1536 (upscaled) -> 4x4 tiles + global = 17 x 81"),
        KnownCount((640, 480), 81, "do_image_splitting=False: the image squashed to one 384x384 view = 81",
                   {"do_image_splitting": False}),
    )},
)
