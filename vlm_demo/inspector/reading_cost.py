"""What a page cost: vision tokens in, text tokens out, and their ratio (DeepSeek-OCR's "compression": text tokens
out per vision token in), per page and per document. Pure arithmetic over what vLLM rendered (an image's
``Expansion``) and what it generated (a page's token count); which vision tokens count is said in words.

vLLM's placeholder range for an image holds more than the vision encoder's features: start and end markers, row
breaks and view separators (Pixtral's ``[IMG_BREAK]``/``[IMG_END]`` have ids of their own, so the ids tell them
apart), and in some families newline and separator positions under the feature token's own id (DeepSeek-OCR's
count repeats ``<image>`` for every row's newline and the view separator: only the family's rule tells them
apart, given here as ``breaks``). The DeepSeek-OCR paper's count leaves all of these out, so the ratio here is
over the features alone, and the range's other tokens are said beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .core import Expansion


@dataclass(frozen=True)
class PageCost:
    """One page's vision tokens in and text tokens out."""

    label: str
    """Which page ("page 3 of report.pdf", or the picture's name)."""
    range_tokens: int
    """Positions of the image's whole placeholder range in the prompt."""
    feature_ids: int
    """Positions in the range holding the feature token's id."""
    breaks: Mapping[str, int]
    """Of those, the positions the family's rule says are newline / separator embeddings, by kind (DeepSeek-OCR:
    {"row newline": 46, "view separator": 1}); empty where the ids tell them apart."""
    text_out: int
    """Tokens generated for the page."""
    counted: str
    """Which vision tokens are counted, in words."""

    @property
    def vision_in(self) -> int:
        """The vision tokens counted: the features (the range's feature-token positions less ``breaks``)."""
        return self.feature_ids - sum(self.breaks.values())

    @property
    def others(self) -> int:
        """The range's positions not counted: its other ids (markers, breaks) and ``breaks``."""
        return self.range_tokens - self.vision_in

    @property
    def ratio(self) -> float | None:
        """Text tokens out per vision token in (None without vision tokens)."""
        return self.text_out / self.vision_in if self.vision_in else None


@dataclass(frozen=True)
class DocumentCost:
    """A document's pages and their totals."""

    pages: tuple[PageCost, ...]
    """Each page's cost, in page order."""

    @property
    def vision_in(self) -> int:
        """Vision tokens counted, all pages."""
        return sum(p.vision_in for p in self.pages)

    @property
    def range_tokens(self) -> int:
        """Placeholder positions, all pages."""
        return sum(p.range_tokens for p in self.pages)

    @property
    def text_out(self) -> int:
        """Tokens generated, all pages."""
        return sum(p.text_out for p in self.pages)

    @property
    def ratio(self) -> float | None:
        """Text tokens out per vision token in over the whole document (None without vision tokens)."""
        return self.text_out / self.vision_in if self.vision_in else None


def page_cost(expansion: Expansion, text_out: int, label: str = "", breaks: Mapping[str, int] | None = None
              ) -> PageCost:
    """What one page cost: ``expansion`` is its image's placeholder range as vLLM rendered it, ``text_out`` the
    tokens generated for it, ``breaks`` the family's count of newline / separator positions among the
    feature-token ids (``PageCost.breaks``; DeepSeek-OCR Gundam: 16 + 10 x tile rows newlines and 1 view
    separator; DeepSeek-OCR-2: 1 view separator). ``ValueError`` where ``breaks`` outnumber the features."""
    breaks = {kind: n for kind, n in (breaks or {}).items() if n}
    if sum(breaks.values()) > expansion.count or any(n < 0 for n in breaks.values()):
        raise ValueError(f"{sum(breaks.values())} break positions among {expansion.count} feature tokens")
    label = label or (f"page {expansion.page} of {expansion.source}" if expansion.page else
                      f"{expansion.modality} {expansion.index + 1}")
    features = expansion.count - sum(breaks.values())
    words = [f"vision tokens in: {features} of the {expansion.length} positions of the image's placeholder range, "
             f"the vision encoder's features ({expansion.placeholder!r}, id {expansion.token_id})"]
    if breaks:
        said = ", ".join(f"{n} {kind}" for kind, n in breaks.items())
        words.append(f"not counted: {said}, placed under the same id (the family's rule: vLLM counts them as "
                     "image tokens, the DeepSeek-OCR paper does not)")
    if expansion.length > expansion.count:
        words.append(f"not counted: {expansion.length - expansion.count} tokens of other ids in the range (start/end "
                     "markers, row breaks, separators)")
    words.append(f"text tokens out: the {text_out} tokens generated")
    return PageCost(label, expansion.length, expansion.count, breaks, text_out, "; ".join(words))


def cost_json(document: DocumentCost) -> dict[str, Any]:
    """The document's cost as data: per page and in total, vision tokens in (and the whole ranges), text tokens
    out, their ratio, and per page which vision tokens are counted."""
    def figures(cost: PageCost | DocumentCost) -> dict[str, Any]:
        return {"vision_tokens_in": cost.vision_in, "placeholder_tokens": cost.range_tokens,
                "text_tokens_out": cost.text_out, "ratio": cost.ratio}
    return {"pages": [{"label": p.label, **figures(p), "not_counted": p.others, "breaks": dict(p.breaks),
                       "counted": p.counted} for p in document.pages],
            "total": figures(document)}
