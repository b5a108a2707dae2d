"""Detect mode: the family's own "where is X" question, and the answer held to its box grammar inside the picture."""

from __future__ import annotations

from dataclasses import replace

from .. import profile
from ..errors import InputError
from ..families.box_formats import Grounding
from ..inspector import Inspection
from ..registry import Sampling
from .requests import ChatRequest


def grounding_of(found: profile.Profile, detect: bool = False) -> Grounding:
    """The grounding format of the model ``found`` (its profile); ``InputError`` naming the families that have one
    where it has none (with ``detect``: where its format has no Detect mode, a document reader's)."""
    grounding = found.adapter.grounding
    if grounding is None:
        having = ", ".join(profile.grounding_families())
        raise InputError(f"{found.spec.name} has no box format the app reads (families with one: {having})")
    if detect and not grounding.detects:
        having = ", ".join(profile.grounding_families(detect=True))
        raise InputError(f"{found.spec.name} reads documents: its boxes come with a page's reading, not from a "
                         f"\"where is X\" question (Detect mode: {having})")
    return grounding


def detect_request(request: ChatRequest, found: profile.Profile, what: str) -> ChatRequest:
    """Detect mode: the last user turn asks the family's own question for ``what`` after the person's own words
    (its images kept), and the answer is held to the family's box grammar (vLLM's structured outputs), so it
    always parses."""
    grounding = grounding_of(found, detect=True)
    what = what.strip()
    if not what:
        raise InputError("say what to detect")
    *before, last = request.turns
    if not last.count("image") and not any(t.count("image") for t in before):
        raise InputError("Detect needs an image")
    question = grounding.detect_prompt(what)
    text = f"{last.text.strip()}\n{question}" if last.text.strip() else question
    return replace(request, turns=(*before, replace(last, text=text)), detect=what)


def detect_sampling(sampling: Sampling, found: profile.Profile, what: str, inspection: Inspection) -> Sampling:
    """``sampling`` held to the family's box grammar for ``what``, every coordinate inside the conversation's
    last image as the format counts it (for Qwen2.5-VL the processed size the engine's processor made)."""
    grounding = grounding_of(found, detect=True)
    images = inspection.items.get("image", ())
    bounds = grounding.bounds(images[-1].processed_size if images else None)
    if bounds is None:
        raise InputError(f"{found.spec.name}'s processor gave no processed size for the picture; Detect cannot bound "
                         "the boxes")
    return replace(sampling, regex=grounding.detect_regex(what, bounds))
