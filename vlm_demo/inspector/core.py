"""What the engine's rendered input says, as the panels and ``inspect --json`` show it: ``inspect(rendered)`` ->
``Inspection`` (per item: placeholder, feature token, count, range, geometry; the budget; the token runs), its JSON
and its run-length text. Nothing here renders templates or expands placeholders: every number comes from vLLM."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..engine import RenderedPrompt


@dataclass(frozen=True)
class Expansion:
    """How one multimodal item (an image, a video) became tokens."""

    modality: str
    """"image" or "video"."""
    index: int
    """Position of the item among its modality's items in the prompt (0-based)."""
    placeholder: str
    """Text that stood for the item in the template's output."""
    token_id: int
    """Id of the feature token."""
    count: int
    """Feature tokens in its range."""
    offset: int
    """Index of the range's first token in the expanded prompt."""
    length: int
    """Positions the range covers (features plus any start/end markers inside it)."""
    orig_size: tuple[int, int] | None
    """Width and height as uploaded (None for precomputed embeddings)."""
    processed_size: tuple[int, int] | None
    """Width and height the vision encoder saw, where the family resizes."""
    grid: tuple[int, int] | None
    """Rows and columns of tiles / partitions / crops / token cells, or None."""
    thumbnail: bool | None
    """Whether a global thumbnail view was added, for tiling families."""
    num_frames: int | None = None
    """Videos: frames vLLM's loader sampled (None for images, or where the renderer does not say)."""
    timestamps_s: tuple[float, ...] | None = None
    """Videos: where each sampled frame sits in the clip, in seconds."""
    groups: tuple[int, ...] | None = None
    """Videos: feature tokens per group of frames that became tokens together, in prompt order."""
    frames_per_group: int | None = None
    """Videos: sampled frames per group (Qwen: 2 per temporal patch; InternVL, LLaVA-OneVision: 1), where
    the frames divide evenly among the groups."""
    source: str | None = None
    """Images: the document a page came from (its file name); None for a picture."""
    page: int | None = None
    """Images: the page's number in that document, from 1."""
    dpi: int | None = None
    """Images: the resolution the page was rasterised at (its ``orig_size`` is the rasterised size)."""
    name: str | None = None
    """Clips: the file's name."""
    seconds: float | None = None
    """Clips: the whole clip's length."""
    rate_in: int | None = None
    """Clips: its own sampling rate, as the file says."""
    rate: int | None = None
    """Clips: the rate the app sent it at (the model's feature extractor's; resampled with soxr)."""
    feature_frames: int | None = None
    """Clips: the feature extractor's frames the model took, where the family's rule reads them."""
    heard_s: float | None = None
    """Clips: the seconds those frames cover (less than ``seconds`` where the family's cap cut the clip)."""
    rule: str | None = None
    """Clips: how the count comes about, in the family's words."""

    def group_frames(self, k: int) -> tuple[int, ...]:
        """The 0-based sampled frames of group ``k`` (empty where the frames per group are not known)."""
        n = self.frames_per_group or 0
        return tuple(range(k * n, (k + 1) * n))


VIDEO_FIELDS = ("num_frames", "timestamps_s", "groups", "frames_per_group")
"""``Expansion`` fields that only videos have (left out of an image's JSON)."""
PAGE_FIELDS = ("source", "page", "dpi")
"""``Expansion`` fields that only images have: where a document's page came from (left out of a video's JSON)."""
AUDIO_FIELDS = ("name", "seconds", "rate_in", "rate", "feature_frames", "heard_s", "rule")
"""``Expansion`` fields that only clips have."""
PICTURE_FIELDS = ("orig_size", "processed_size", "grid", "thumbnail")
"""``Expansion`` fields that clips have not (left out of a clip's JSON)."""
Origin = tuple[str, int, int]
"""Where an image came from when it is a document's page: (the document's file name, the page from 1, its DPI)."""


@dataclass(frozen=True)
class Budget:
    """Where the context window goes."""

    media_tokens: Mapping[str, int]
    """Per modality, the positions its items' ranges take."""
    text_tokens: int
    """All other prompt positions."""
    total: int
    """Prompt length."""
    max_model_len: int
    """The engine's context window."""

    @property
    def free(self) -> int:
        """Positions left for the answer."""
        return max(0, self.max_model_len - self.total)


@dataclass(frozen=True)
class Inspection:
    """Everything the panels show about one rendered request."""

    model: str
    """Registry name of the model."""
    family: str
    """The family adapter that describes it ("generic" when none does)."""
    content_format: str
    """"string" (placeholders inserted by vLLM) or "openai" (the template emits them)."""
    prompt: str
    """The chat template's output, before placeholder expansion."""
    conversation: tuple[dict[str, Any], ...]
    """The messages as the template saw them."""
    prompt_token_ids: tuple[int, ...]
    """The expanded ids the engine runs on."""
    items: Mapping[str, tuple[Expansion, ...]]
    """Per modality, one entry per item, in prompt order."""
    geometry_note: str | None
    """Why no tiles or grid are drawn (no geometry adapter for the model), else None."""
    budget: Budget
    """Token budget."""
    runs: tuple[tuple[str, int], ...]
    """The ids as runs: (special token, repeat count) and the decoded text between them."""
    token_texts: Mapping[int, str] = field(default_factory=dict)
    """Each prompt id's own text (the id decoded alone), where the engine's tokenizer is at hand; empty for a
    remote engine (the hover titles then give ids and positions only)."""
    mm_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """The processor kwargs the request went with (vLLM's ``mm_processor_kwargs``; the checkpoint's own config
    fills in the rest)."""
    media_io: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The media loading options it went with, per modality (vLLM's ``media_io_kwargs``: video sampling)."""
    special_tokens: tuple[str, ...] = ()
    """The special-token strings of the tokenizer that rendered it (the prompt view marks them), whether an engine
    or vLLM's renderer alone did."""
    joined: Mapping[int, tuple[int, str]] = field(default_factory=dict)
    """Where one character spans several tokens (a byte-level tokenizer's pieces of a multi-byte character, each
    alone no text): ``{position: (tokens, the character(s))}``, so the prompt view shows the character."""
    frames: Mapping[str, tuple[tuple[Any, ...], ...]] = field(default_factory=dict)
    """Per time-based modality, per item: what the panels draw (empty where the renderer does not give it): a video's
    frames vLLM's loader sampled, small pictures for the contact sheet; a clip's waveform peaks."""

    def expansions(self) -> tuple[Expansion, ...]:
        """Every item of every modality, in prompt order."""
        return tuple(sorted((e for items in self.items.values() for e in items), key=lambda e: e.offset))


def inspect(rendered: RenderedPrompt, runs: tuple[tuple[str, int], ...],
            token_texts: Mapping[int, str] | None = None,
            joined: Mapping[int, tuple[int, str]] | None = None,
            special_tokens: tuple[str, ...] = (), origins: Sequence[Origin | None] = (),
            rules: Mapping[str, str] | None = None) -> Inspection:
    """Build the inspection of one rendered request (``token_texts``: each id's own text, where known;
    ``joined``: characters that span several tokens; ``special_tokens``: the renderer's; ``origins``: per image in
    prompt order, the document page it is, or None; ``rules``: the family's count rule in words per modality)."""
    rules = rules or {}
    ids = rendered.prompt_token_ids
    items = {
        modality: tuple(
            Expansion(
                modality=modality,
                index=i,
                placeholder=rendered.placeholders.get(modality, ""),
                token_id=rendered.token_ids[modality],
                count=sum(1 for t in ids[r.offset:r.offset + r.length] if t == rendered.token_ids[modality]),
                offset=r.offset,
                length=r.length,
                orig_size=g.orig_size,
                processed_size=g.processed_size,
                grid=g.grid,
                thumbnail=g.thumbnail,
                **(_video_fields(ids, r, g, rendered.token_ids[modality], _nth(rendered.frames.get(modality), i))
                   if modality == "video" else {}),
                **(dict(zip(PAGE_FIELDS, origin, strict=True))
                   if modality == "image" and (origin := _nth(tuple(origins), i)) is not None else {}),
                **(_clip_fields(g, _nth(rendered.frames.get(modality), i), rules.get(modality))
                   if modality == "audio" else {}),
            )
            for i, (r, g) in enumerate(zip(ranges, rendered.geometry[modality], strict=True))
        )
        for modality, ranges in rendered.ranges.items()
    }
    media = _media_positions(ids, items)
    return Inspection(
        model=rendered.model,
        family=rendered.family,
        content_format=rendered.content_format,
        prompt=rendered.prompt,
        conversation=rendered.conversation,
        prompt_token_ids=ids,
        items=items,
        geometry_note=rendered.geometry_note,
        budget=Budget(media, len(ids) - sum(media.values()), len(ids), rendered.max_model_len),
        runs=runs,
        token_texts=dict(token_texts or {}),
        mm_kwargs=dict(rendered.mm_kwargs),
        media_io={m: dict(v) for m, v in rendered.media_io_kwargs.items()},
        joined=dict(joined or {}),
        special_tokens=tuple(special_tokens),
        frames={m: tuple(_drawn(f) for f in found) for m, found in rendered.frames.items()},
    )


def _media_positions(ids: tuple[int, ...], items: Mapping[str, tuple[Expansion, ...]]) -> dict[str, int]:
    """Per modality, the prompt positions its items take. Where items of two modalities share a range (a video
    with its own sound: frames and sound interleaved inside one pair of markers), each feature token counts for its
    own modality and the markers for the first one's."""
    spans = sorted((e.offset, e.offset + e.length) for found in items.values() for e in found)
    if all(a[1] <= b[0] for a, b in zip(spans, spans[1:])):  # (no shared range: each range is its modality's)
        return {modality: sum(e.length for e in found) for modality, found in items.items()}
    owner: dict[int, str] = {}
    for modality, found in items.items():
        for e in found:
            for pos in range(e.offset, e.offset + e.length):
                owner.setdefault(pos, modality)
    for modality, found in items.items():
        for e in found:
            for pos in range(e.offset, e.offset + e.length):
                if ids[pos] == e.token_id:
                    owner[pos] = modality
    counted = dict.fromkeys(items, 0)
    for modality in owner.values():
        counted[modality] += 1
    return counted


def _drawn(sent: Any) -> tuple[Any, ...]:
    """What the panels draw of a time-based item: a video's frame thumbnails, a clip's waveform peaks."""
    if sent is None:
        return ()
    return tuple(sent.peaks) if hasattr(sent, "peaks") else tuple(sent.thumbnails)


def _clip_fields(g: Any, sent: Any, rule: str | None) -> dict[str, Any]:
    """A clip's figures: as the app sent it (None from a remote server's render) and what the family's rule read."""
    out: dict[str, Any] = {"feature_frames": g.feature_frames, "heard_s": g.heard_s, "rule": rule}
    if sent is not None:
        out.update(name=sent.name, seconds=round(sent.seconds, 3), rate_in=sent.rate_in, rate=sent.rate)
    return out


def _nth(found: tuple[Any, ...] | None, i: int) -> Any:
    return found[i] if found and i < len(found) else None


def feature_runs(ids: tuple[int, ...], offset: int, length: int, token_id: int) -> tuple[int, ...]:
    """Lengths of the unbroken runs of ``token_id`` in ``ids[offset:offset + length]``, in order."""
    runs, n = [], 0
    for t in ids[offset:offset + length]:
        if t == token_id:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return tuple([*runs, n] if n else runs)


def _video_fields(ids: tuple[int, ...], r: Any, g: Any, token_id: int, sampled: Any) -> dict[str, Any]:
    """A video's frames and groups: the sampled frames from vLLM's loader; the groups from the family's rule
    over the processor output where it has one (it must add up to the ids' count), else the runs of the
    feature token in the ids (Qwen3-VL's and InternVL's groups are separate runs)."""
    runs = feature_runs(ids, r.offset, r.length, token_id)
    groups = g.groups if g.groups and sum(g.groups) == sum(runs) else runs
    frames = len(sampled.indices) if sampled is not None else None
    per_group = frames // len(groups) if frames and groups and frames % len(groups) == 0 else None
    return {"num_frames": frames, "timestamps_s": sampled.timestamps_s if sampled is not None else None,
            "groups": tuple(groups), "frames_per_group": per_group}


def to_json(inspection: Inspection) -> dict[str, Any]:
    """The ``inspect --json`` object: per modality ``images`` / ``videos`` lists and token counts."""
    out: dict[str, Any] = {
        "model": inspection.model,
        "family": inspection.family,
        "content_format": inspection.content_format,
        "prompt": inspection.prompt,
        "prompt_token_ids": list(inspection.prompt_token_ids),
        "max_model_len": inspection.budget.max_model_len,
        "num_image_tokens": 0,
        "num_video_tokens": 0,
        "num_audio_tokens": 0,
        "num_text_tokens": inspection.budget.text_tokens,
        "images": [],
        "videos": [],
        "audios": [],
        "geometry_note": inspection.geometry_note,
    }
    for modality, found in inspection.items.items():
        out[f"num_{modality}_tokens"] = inspection.budget.media_tokens[modality]
        skip = {"index", "modality", *(VIDEO_FIELDS if modality != "video" else PAGE_FIELDS),
                *(AUDIO_FIELDS if modality != "audio" else (*PICTURE_FIELDS, *PAGE_FIELDS))}
        out[f"{modality}s"] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(e).items()
                                if k not in skip} for e in found]
    return out


def run_length_text(inspection: Inspection) -> str:
    """Compact text of the sequence, e.g. ``<img> <IMG_CONTEXT>x1792 </img>``; plain text stays text."""
    pieces = [f" {text}x{n} " if n > 1 else f" {text} " if _is_token(text) else text
              for text, n in inspection.runs]
    return re.sub(r" {2,}", " ", "".join(pieces)).strip()


def report_text(inspection: Inspection) -> str:
    """The inspection for a terminal (``python -m vlm_demo inspect``): the model, the rendered prompt, the
    expanded tokens as runs, the budget and each item's expansion."""
    lines = []
    b = inspection.budget
    lines.append(f"model: {inspection.model}   family: {inspection.family}   content format: "
                 f"{inspection.content_format}")
    lines.append(f"--- rendered prompt ---\n{inspection.prompt}\n--- expanded tokens ---")
    lines.append(run_length_text(inspection))
    media = "".join(f"{n} {m} + " for m, n in b.media_tokens.items())
    lines.append(f"--- budget: {b.total} tokens = {media}{b.text_tokens} text, of max_model_len {b.max_model_len}")
    if inspection.geometry_note:
        lines.append(f"--- {inspection.geometry_note}: counts, ids and ranges are vLLM's")
    for e in inspection.expansions():
        if e.modality == "audio":
            lines.append(f"audio {e.index}: {e.count} x {e.placeholder!r} token {e.token_id} at "
                         f"[{e.offset}, {e.offset + e.length}) {clip_text(e)}")
            continue
        grid = f" grid {e.grid[0]}x{e.grid[1]}" if e.grid else ""
        thumb = " + thumbnail" if e.thumbnail else ""
        lines.append(f"{e.modality} {e.index}: {e.count} x {e.placeholder!r} token {e.token_id} at "
                     f"[{e.offset}, {e.offset + e.length}) size {e.orig_size} -> {e.processed_size}{grid}{thumb}")
        if e.modality == "video":
            times = ", ".join(f"{t:.2f}" for t in e.timestamps_s or ())
            lines.append(f"  {e.num_frames} frames sampled (at {times} s); groups of tokens: {list(e.groups or ())}"
                         + (f", {e.frames_per_group} frames each" if e.frames_per_group else ""))
    return "\n".join(lines)


def clip_text(e: Expansion) -> str:
    """A clip's figures in words: "5.0 s at 48 kHz -> 16 kHz: 125 tokens (500 mel frames; 25 tokens a second: ...)";
    what a cap cut ("30.0 of 45.0 s heard: the last 15.0 s were cut; split the clip")."""
    def khz(rate: int) -> str:
        return f"{rate / 1000:g} kHz"
    sent = (f"{seconds(e.seconds)} s at {khz(e.rate_in)} -> {khz(e.rate)}"
            if e.seconds is not None and e.rate_in and e.rate else "a video's own sound")
    frames = f"{e.feature_frames:,} feature frame{'s' if e.feature_frames != 1 else ''}" if e.feature_frames else ""
    why = "; ".join(x for x in (frames, e.rule or "") if x)
    text = f"{sent}: {e.count:,} token{'s' if e.count != 1 else ''}" + (f" ({why})" if why else "")
    cut = cut_seconds(e)
    if cut:
        text += f"; {e.heard_s:.1f} of {e.seconds:.1f} s heard: the last {cut:.1f} s were cut; split the clip"
    return text


def seconds(value: float) -> str:
    """A clip's length as the panels write it: tenths, hundredths below a second ("45.0", "0.05")."""
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def cut_seconds(e: Expansion) -> float:
    """The seconds of a clip its family's cap left unheard (0.0: none, or not known)."""
    if e.heard_s is None or e.seconds is None:
        return 0.0
    cut = e.seconds - e.heard_s
    return cut if cut >= 0.05 else 0.0


def prefill_work(inspection: Inspection) -> str:
    """What a prefill works on, in words: the views the vision encoder runs over (a tiling family's tiles and
    thumbnail, a video's sampled frames, else one per picture), the vision tokens they become, and the prompt
    they sit in ("7 views of 1 picture, 903 vision tokens, in a 1,024-token prompt")."""
    parts = []
    for modality, found in inspection.items.items():
        if not found:
            continue
        n = len(found)
        noun = {"image": "picture", "audio": "clip"}.get(modality, modality) + ("s" if n != 1 else "")
        if modality == "video":
            frames = sum(e.num_frames or 0 for e in found)
            parts.append(f"{frames} frames of {n} {noun}" if frames else f"{n} {noun}")
            continue
        if modality == "audio":
            parts.append(f"{n} {noun} ({sum(e.heard_s or e.seconds or 0.0 for e in found):.1f} s)")
            continue
        views = sum(e.grid[0] * e.grid[1] + (1 if e.thumbnail else 0) if e.grid and e.thumbnail is not None else 1
                    for e in found)
        parts.append(f"{views} views of {n} {noun}" if views != n else f"{n} {noun}")
    tokens = {kind: sum(e.count for m, found in inspection.items.items() for e in found  # (feature tokens, no
                        if (m == "audio") == (kind == "audio"))                      # markers)
              for kind in ("vision", "audio")}
    counted = " and ".join(f"{n:,} {kind} tokens" for kind, n in tokens.items() if n)
    prompt = f"a {inspection.budget.total:,}-token prompt"
    return f"{' and '.join(parts)}, {counted}, in {prompt}" if parts else prompt


def _is_token(text: str) -> bool:
    return text.startswith("<") and text.endswith(">") and " " not in text
