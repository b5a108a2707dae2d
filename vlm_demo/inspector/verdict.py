"""An audit's verdict: a server's prompt for a request held against vLLM's reference render of the same request
(pure: both sides are given). Equal; or differs, with the first differing position, the text on both sides
there, each picture's token count on both sides and the likely causes in words a person can act on; or could
not check, with why. A count-only audit (a server that gives no ids) says so."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..engine.server_prompt import ServerPrompt
from ..engine.types import RenderedPrompt

EQUAL, DIFFERS, UNCHECKED = "equal", "differs", "could not check"
EXIT_CODES = {EQUAL: 0, DIFFERS: 1, UNCHECKED: 2}
"""The CLI's exit status for each verdict (a deployment's CI runs the audit)."""
CONTEXT = 16
"""Tokens shown on each side of the first difference."""
NO_PLACEHOLDER = ("Failed to apply prompt replacement", "placeholder")
"""vLLM's words when the prompt holds no placeholder where a picture's tokens go."""
UNTRUSTED = "--trust-request-mm-kwargs"
"""vLLM's words when a server refuses per-request processor settings."""

Runs = Callable[[Sequence[int]], Sequence[tuple[str, int]]]
"""Token ids as (text, repeat) runs: the reference tokenizer's (``Renderer.token_runs``)."""


@dataclass(frozen=True)
class ItemCount:
    """One picture's (or clip's) placeholder tokens on each side."""

    modality: str
    index: int
    reference: int
    server: int | None
    """None: the server's ids cannot be split into items (a count-only audit, or runs that do not line up)."""


@dataclass(frozen=True)
class Verdict:
    status: str
    """``EQUAL``, ``DIFFERS`` or ``UNCHECKED``."""
    how: str
    """How the server's side was read (``engine.server_prompt``: render endpoint, returned ids, usage counts)."""
    causes: tuple[str, ...] = ()
    """The likely causes, one line each (or why the audit could not check)."""
    first_difference: int | None = None
    """The first position where the ids differ."""
    reference_text: str = ""
    server_text: str = ""
    """The prompt on each side around the first difference (runs of one token as ``token×n``)."""
    items: tuple[ItemCount, ...] = ()
    reference_tokens: int = 0
    server_tokens: int | None = None
    mm_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """The processor settings the request carried (both sides got them)."""
    note: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    def text(self) -> str:
        """The verdict for a terminal: one line, then the details."""
        lines = [f"{self.status} ({self.how}): {self.reference_tokens:,} prompt tokens by the reference, "
                 + ("none by the server" if self.server_tokens is None else f"{self.server_tokens:,} by the server")]
        lines += [f"  cause: {cause}" for cause in self.causes]
        lines += [f"  {i.modality} {i.index + 1}: {i.reference} tokens by the reference, "
                  f"{'?' if i.server is None else i.server} by the server" for i in self.items]
        if self.first_difference is not None:
            lines += [f"  first difference at token {self.first_difference}:",
                      f"    reference: {self.reference_text}", f"    server:    {self.server_text}"]
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)


def verdict(reference: RenderedPrompt, server: ServerPrompt, runs: Runs, settings_hint: str = "",
            settings: Mapping[str, Any] | None = None) -> Verdict:
    """``server`` held against ``reference``. ``settings_hint``: what the reference needs to give the server's
    counts (``service.audit`` searches the model's controls), added to a token-count cause. ``settings``: the
    request's processor settings as the controls name them (default: as vLLM got them)."""
    base = {"how": server.how, "reference_tokens": len(reference.prompt_token_ids), "server_tokens":
            server.prompt_tokens, "mm_kwargs": dict(reference.mm_kwargs if settings is None else settings)}
    if server.error is not None:
        return _refused(reference, server, base)
    if server.ids is None:
        return _counted(reference, server, base)
    ref, got = reference.prompt_token_ids, server.ids
    items = _items(reference, server)
    if ref == got:
        return Verdict(EQUAL, items=items, **base)
    first = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), min(len(ref), len(got)))
    causes = _causes(reference, server, items, settings_hint, base["mm_kwargs"])
    start = max(0, first - CONTEXT)
    return Verdict(DIFFERS, causes=tuple(causes), first_difference=first, items=items,
                   reference_text=_shown(runs, ref[start:first + CONTEXT], start > 0),
                   server_text=_shown(runs, got[start:first + CONTEXT], start > 0), **base)


def _causes(reference: RenderedPrompt, server: ServerPrompt, items: Sequence[ItemCount], settings_hint: str,
            settings: Mapping[str, Any]) -> list[str]:
    causes = []
    for modality in reference.ranges:
        mine = [i for i in items if i.modality == modality]
        if mine and all(i.server == 0 for i in mine):
            placeholder = reference.placeholders.get(modality) or modality
            causes.append(f"placeholders missing from the prompt: the server's prompt holds no {placeholder} tokens "
                          f"for its {len(mine)} {modality}(s)")
            continue
        unknown = [i for i in mine if i.server is None]
        if unknown and _total(server.ids or (), reference, modality) != sum(i.reference for i in mine):
            causes.append(f"the {modality}s' tokens differ in number ({sum(i.reference for i in mine)} here, "
                          f"{_total(server.ids or (), reference, modality)} there, in runs that do not split per "
                          f"{modality}): the server's processor runs with other settings{settings_hint}")
        differ = [i for i in mine if i.server is not None and i.server != i.reference]
        if differ:
            counts = ", ".join(f"{modality} {i.index + 1}: {i.reference} here, {i.server} there" for i in differ)
            sent = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "none: the checkpoint's own"
            causes.append(f"a different token count per {modality} ({counts}) with the same request settings "
                          f"({sent}): the server's processor runs with other settings (a server started with "
                          f"--mm-processor-kwargs, or another preprocessor config){settings_hint}")
    ours, theirs = _outside_media(reference, server)
    if ours != theirs:
        line = "a different chat template or system prompt: the text around the pictures differs"
        if server.content_format and server.content_format != reference.content_format:
            line += (f"; a different content format too (the server's template: {server.content_format}, the "
                     f"model's: {reference.content_format})")
        causes.append(line)
    return causes or ["the ids differ where no rule here explains it: see the text on both sides"]


def _refused(reference: RenderedPrompt, server: ServerPrompt, base: dict[str, Any]) -> Verdict:
    """The server refused the request: a missing placeholder is a finding (with where the model's own template
    puts it), anything else means the audit could not check."""
    error = server.error or ""
    if any(words in error for words in NO_PLACEHOLDER) and reference.ranges:
        modality = next(iter(reference.ranges))
        placeholder = reference.placeholders.get(modality) or modality
        at = reference.prompt.find(placeholder)
        around = reference.prompt[max(0, at - 60):at + len(placeholder) + 60] if at >= 0 else reference.prompt[:120]
        return Verdict(DIFFERS, causes=(
            f"the server's chat template puts no {placeholder} in the prompt, so vLLM cannot place each {modality}'s "
            f"tokens (it answered: {error[:200]}); the model's own template puts it here: {around!r}",), **base)
    if UNTRUSTED in error:
        return Verdict(UNCHECKED, causes=(
            "the server refuses per-request processor settings (it was started without --trust-request-mm-kwargs): "
            "audit without --mm-kwargs, or start it with that flag",), **base)
    return Verdict(UNCHECKED, causes=(f"the server refused the request: {error[:300]}",), **base)


def _counted(reference: RenderedPrompt, server: ServerPrompt, base: dict[str, Any]) -> Verdict:
    """A count-only audit: the server's ``prompt_tokens`` against the reference's length."""
    note = "count-only: the server gives no token ids, and a count cannot see a different text of the same length"
    if server.prompt_tokens is None:
        return Verdict(UNCHECKED, causes=("the server gives neither token ids nor a prompt token count",), **base)
    ref = len(reference.prompt_token_ids)
    if server.prompt_tokens == ref:
        return Verdict(EQUAL, note=note, **base)
    delta = server.prompt_tokens - ref
    return Verdict(DIFFERS, note=note, causes=(
        f"the server counts {abs(delta):,} prompt tokens {'more' if delta > 0 else 'fewer'} than the reference: "
        "other processor settings (the pictures' token counts) or another chat template",), **base)


def _items(reference: RenderedPrompt, server: ServerPrompt) -> tuple[ItemCount, ...]:
    """Each item's feature tokens on both sides. The server's come from its ranges where it gives them (render
    endpoint), else from its ids split by the reference's runs: item i holds ``k_i`` runs of its feature token
    there, and the server's runs of that token are dealt out the same way where their number matches (else the
    server's side is unknown, or 0 where it has none at all)."""
    out = []
    ref_ids, ids = reference.prompt_token_ids, server.ids or ()
    for modality, ranges in reference.ranges.items():
        token = reference.token_ids.get(modality)
        per_item = [_runs_of(ref_ids[r.offset:r.offset + r.length], token) for r in ranges]
        theirs = _runs_of(ids, token)
        placed = (server.ranges or {}).get(modality, ())
        split: list[int | None]
        if len(placed) == len(ranges):
            split = [sum(_runs_of(ids[r.offset:r.offset + r.length], token)) for r in placed]
        elif not theirs:
            split = [0] * len(ranges)
        elif len(theirs) == sum(len(r) for r in per_item):
            split, at = [], 0
            for runs in per_item:
                split.append(sum(theirs[at:at + len(runs)]))
                at += len(runs)
        else:
            split = [None] * len(ranges)
        out += [ItemCount(modality, i, sum(runs), n) for i, (runs, n) in enumerate(zip(per_item, split, strict=True))]
    return tuple(out)


def _total(ids: Sequence[int], reference: RenderedPrompt, modality: str) -> int:
    token = reference.token_ids.get(modality)
    return sum(1 for t in ids if t == token)


def _runs_of(ids: Sequence[int], token: int | None) -> list[int]:
    """The lengths of the runs of ``token`` in ``ids``."""
    runs, n = [], 0
    for t in ids:
        if t == token:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    if n:
        runs.append(n)
    return runs


def _outside_media(reference: RenderedPrompt, server: ServerPrompt) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Both sides' ids with each item cut to one marker (-1): the text around the pictures. By the ranges where the
    server gives its own (what a processor adds inside an item, such as Gemma 3's pan-and-scan words, is the
    item's), else by cutting each run of a feature token to one."""
    ids = server.ids or ()
    placed = {m: r for m, r in (server.ranges or {}).items() if r}
    if server.ranges is not None and {m: len(r) for m, r in placed.items()} == {
            m: len(r) for m, r in reference.ranges.items()}:
        return _cut(reference.prompt_token_ids, reference.ranges), _cut(ids, placed)
    features = set(reference.token_ids.values())

    def runs_cut(seq: Sequence[int]) -> tuple[int, ...]:
        return tuple(-1 if t in features else t for i, t in enumerate(seq)
                     if t not in features or i == 0 or seq[i - 1] != t)
    return runs_cut(reference.prompt_token_ids), runs_cut(ids)


def _cut(ids: Sequence[int], ranges: Mapping[str, Sequence[Any]]) -> tuple[int, ...]:
    spans = sorted((r.offset, r.offset + r.length) for items in ranges.values() for r in items)
    out, at = [], 0
    for start, end in spans:
        out += [*ids[at:start], -1]
        at = max(at, end)
    return (*out, *ids[at:])


def _shown(runs: Runs, ids: Sequence[int], cut: bool) -> str:
    text = "".join(f"{piece}×{n}" if n > 1 else piece for piece, n in runs(ids))
    return ("…" if cut else "") + text.replace("\n", "\\n") + "…"
