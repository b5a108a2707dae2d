"""The one table of differences between VLM families that code needs (the rest is in models.yaml)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """What the app must know about one family of vision-language models."""

    name: str
    """Key used in ``models.yaml`` (``family:``)."""
    title: str
    """Human name of the family."""
    model_type: str
    """``model_type`` in a checkpoint's config.json (to recognise a local model directory)."""
    image_token: str
    """The token that fills an image's placeholder range after expansion."""
    placeholder: str
    """Text standing for one image in the chat template's output, before expansion."""
    slider_kwargs: frozenset[str]
    """Image-processor kwargs a slider may set per request."""
    cache_sizing_kwargs: frozenset[str]
    """Kwargs whose largest slider value the engine must start with (it sizes its encoder cache)."""
    center_crop: bool = False
    """The processor center-crops to a square (the picture shows the crop)."""
    range_markers: tuple[str, str] = ("", "")
    """Tokens that open and close an image's placeholder range around its image tokens ("" for none);
    a remote server without the render endpoint gives ids only, and the ranges are derived with these."""
    ranges_from_ids: bool = True
    """Whether image ranges can be derived from the expanded ids at all (image-token runs plus markers)."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("llava", "LLaVA-1.5", "llava", "<image>", "<image>", frozenset(), frozenset(),
               center_crop=True),
        Family("qwen2_5_vl", "Qwen2.5-VL", "qwen2_5_vl",
               "<|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>",
               frozenset({"min_pixels", "max_pixels"}), frozenset({"max_pixels"})),
        Family("internvl", "InternVL2.5", "internvl_chat", "<IMG_CONTEXT>", "<image>",
               frozenset({"min_dynamic_patch", "max_dynamic_patch"}), frozenset({"max_dynamic_patch"}),
               range_markers=("<img>", "</img>")),
        Family("ovis", "Ovis2", "ovis", "<|image_pad|>", "<image>",
               frozenset({"max_partition"}), frozenset({"max_partition"}), ranges_from_ids=False),
    )
}


def family_of_model_type(model_type: str) -> Family | None:
    """The family whose checkpoints have this config.json ``model_type``."""
    return next((f for f in FAMILIES.values() if f.model_type == model_type), None)
