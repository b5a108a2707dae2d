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
    image_token: str
    """The token that fills an image's placeholder range after expansion."""
    slider_kwargs: frozenset[str]
    """Image-processor kwargs a slider may set per request."""
    cache_sizing_kwargs: frozenset[str]
    """Kwargs whose largest slider value the engine must start with (it sizes its encoder cache)."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("llava", "LLaVA-1.5", "<image>", frozenset(), frozenset()),
        Family("qwen2_5_vl", "Qwen2.5-VL", "<|image_pad|>",
               frozenset({"min_pixels", "max_pixels"}), frozenset({"max_pixels"})),
        Family("internvl", "InternVL2.5", "<IMG_CONTEXT>",
               frozenset({"min_dynamic_patch", "max_dynamic_patch"}), frozenset({"max_dynamic_patch"})),
        Family("ovis", "Ovis2", "<image>", frozenset({"max_partition"}), frozenset({"max_partition"})),
    )
}
