"""Processor kwargs as controls name them (flat, dotted) and as vLLM takes them (nested, scoped): each conversion
once."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

SCOPES = ("images_kwargs", "videos_kwargs")
"""Per-modality scopes of processor kwargs: ``videos_kwargs.max_pixels`` is ``max_pixels`` for videos alone
(vLLM hands ``{"videos_kwargs": {...}}`` to the HF processor's video part, and keys its cache by it); a kwarg
without a scope applies to every modality the processor takes (Qwen's ``max_pixels``: images and frames)."""


def processor_kwargs(flat: Mapping[str, Any], dicts: Mapping[str, Mapping[str, Any]] | None = None,
                     aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Control values as vLLM's ``mm_processor_kwargs``: scoped names nested (``{"videos_kwargs.max_pixels":
    1}`` -> ``{"videos_kwargs": {"max_pixels": 1}}``), the rest as they are, except a name that is also scoped:
    its unscoped value goes into every scope that does not set it (``{"max_pixels": 2, "videos_kwargs.max_pixels":
    1}`` -> ``{"images_kwargs": {"max_pixels": 2}, "videos_kwargs": {"max_pixels": 1}}``). Given both ways,
    transformers 5.19 applies neither to images (they got the checkpoint's ``max_pixels``), while vLLM 0.32 keys
    its caches as if the unscoped one applied: a later turn then found an image's cached encoding of another size
    than its prompt ("Encoder cache entry ... holds 798 embeddings, but request ... expects 1196") and failed.

    ``aliases`` renames a control to the kwarg the processor's current API takes (Qwen's ``max_pixels`` is
    ``size.longest_edge``: transformers 5.19 deprecates the pixel kwargs). A key of a dict kwarg
    (``size.longest_edge``) sends the whole dict: the keys it does not set at their values in ``dicts`` (the
    checkpoint's: ``size`` for images, ``videos_kwargs.size`` where the video processor's differs), as
    processors take ``size`` whole; an unscoped dict whose checkpoint value differs per scope goes into each
    scope, filled from that scope's own."""
    dicts, aliases = dicts or {}, aliases or {}
    plain: dict[str, dict[str, Any]] = {}  # scope ("" = none) -> name -> value
    keyed: dict[str, dict[str, dict[str, Any]]] = {}  # scope -> dict kwarg -> key -> value
    for key, value in flat.items():
        scope, dot, name = key.partition(".")
        if not (dot and scope in SCOPES):
            scope, name = "", key
        name = aliases.get(name, name)
        head, dot, sub = name.partition(".")
        if dot:
            keyed.setdefault(scope, {}).setdefault(head, {})[sub] = value
        else:
            plain.setdefault(scope, {})[name] = value
    scoped = {name for scope in SCOPES for name in plain.get(scope, {})}
    split = {head for scope in SCOPES for head in keyed.get(scope, {})} | {
        head for head in keyed.get("", {}) if any(f"{scope}.{head}" in dicts for scope in SCOPES)}
    out: dict[str, Any] = {}
    for name, value in plain.get("", {}).items():
        if name in scoped:
            for scope in SCOPES:
                plain.setdefault(scope, {}).setdefault(name, value)
        else:
            out[name] = value
    for head, keys in keyed.get("", {}).items():
        if head in split:
            for scope in SCOPES:
                keyed.setdefault(scope, {})[head] = {**keys, **keyed.get(scope, {}).get(head, {})}
        else:
            out[head] = {**dicts.get(head, {}), **keys}
    for scope in SCOPES:
        part = dict(plain.get(scope, {}))
        for head, keys in keyed.get(scope, {}).items():
            part[head] = {**dicts.get(f"{scope}.{head}", dicts.get(head, {})), **keys}
        if part:
            out[scope] = part
    return out


def image_scoped(flat: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """``flat`` with the kwargs ``names`` as the image processor's alone (``size.longest_edge`` ->
    ``images_kwargs.size.longest_edge``): how controls derived from a model's image processor are sent where the
    model takes them so. Scoped, a value wins over a server's start-up kwargs of either form (vLLM 0.32 lets a
    scoped value win over a flat one, whichever side gives it), and a model's video processor keeps its own."""
    return {f"images_kwargs.{key}" if key in names else key: value for key, value in flat.items()}


def flat_kwargs(nested: Mapping[str, Any]) -> dict[str, Any]:
    """``processor_kwargs`` undone, aliases aside: each value under its dotted name (``--mm-kwargs`` may give
    either form; ``{"size": {"longest_edge": 1}}`` is ``size.longest_edge``)."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{name}": v for name, v in flat_kwargs(value).items()})
        else:
            out[key] = value
    return out
