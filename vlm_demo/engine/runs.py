"""The expanded ids as runs, shared by the local and the remote engine: each special token (with its
repeat count) and the decoded text between special tokens; and which special tokens an answer keeps."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..families import Adapter


def text_segments(ids: Sequence[int], special: Mapping[int, str]) -> list[tuple[int, ...]]:
    """The stretches of non-special ids, in order (what ``token_runs`` must decode)."""
    segments, start = [], 0
    for i, t in enumerate(ids):
        if t in special:
            if start < i:
                segments.append(tuple(ids[start:i]))
            start = i + 1
    if start < len(ids):
        segments.append(tuple(ids[start:]))
    return segments


def token_runs(ids: Sequence[int], special: Mapping[int, str],
               decode: Callable[[Sequence[int]], str]) -> tuple[tuple[str, int], ...]:
    """(special token, repeat count) for each run of one special id, (decoded text, 1) between them."""
    runs: list[tuple[str, int]] = []
    start = 0
    for i, t in enumerate(ids):
        if t not in special:
            continue
        if start < i:
            runs.append((decode(ids[start:i]), 1))
        text = special[t]
        if runs and runs[-1][0] == text and i and ids[i - 1] == t:
            runs[-1] = (text, runs[-1][1] + 1)
        else:
            runs.append((text, 1))
        start = i + 1
    if start < len(ids):
        runs.append((decode(ids[start:]), 1))
    return tuple(runs)


def without_other_specials(text: str, specials: Sequence[str], kept: frozenset[str]) -> str:
    """``text`` less every special-token string in ``specials`` but those in ``kept`` (an answer that keeps
    special tokens for its grounding tags shows those tags and no other special token)."""
    if not kept or not text:
        return text
    for token in specials:
        if token not in kept and token in text:
            text = text.replace(token, "")
    return text


def kept_tags(adapter: Adapter) -> frozenset[str]:
    """Special tokens the family's grounding format writes (InternVL's ``<ref>``/``<box>``, Qwen2-VL's box
    tokens): answers keep them (vLLM's ``skip_special_tokens=False``), and no other special token."""
    grounding = adapter.grounding
    return frozenset(grounding.tags) if grounding else frozenset()
