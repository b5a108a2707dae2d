"""A remote server's render, taken apart without the server: the image ranges read from the expanded ids (where
the server has no render endpoint), the ids as pieces, the chat template's text before expansion rebuilt from
them, the messages as the template saw them, each item's geometry from its token count, and what
``/tokenizer_info`` says (added tokens, named special tokens, the template's content format). Pure: no HTTP.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..families import Adapter, ItemGeometry, no_geometry
from .types import ItemRange


def ranges_from_ids(ids: Sequence[int], image_token_id: int, start_id: int | None = None,
                    end_id: int | None = None) -> list[ItemRange]:
    """Image ranges as vLLM places them, from the expanded ids alone: each run of the image token,
    widened by the family's start / end marker where one sits right beside it (InternVL's ``<img>``)."""
    ranges: list[ItemRange] = []
    i = 0
    while i < len(ids):
        if ids[i] != image_token_id:
            i += 1
            continue
        j = i
        while j < len(ids) and ids[j] == image_token_id:
            j += 1
        lo = i - 1 if start_id is not None and i > 0 and ids[i - 1] == start_id else i
        hi = j + 1 if end_id is not None and j < len(ids) and ids[j] == end_id else j
        ranges.append(ItemRange(lo, hi - lo))
        i = j
    return ranges


def most_common(ids: Sequence[int], ranges: Sequence[ItemRange]) -> int:
    """The id that fills the ranges (the feature token, for a model with no adapter)."""
    counts = Counter(t for r in ranges for t in ids[r.offset:r.offset + r.length])
    return counts.most_common(1)[0][0] if counts else -1


def pieces(ids: Sequence[int], special_names: Mapping[int, str],
           media: Mapping[str, Sequence[ItemRange]] | None = None) -> list[tuple[str, Any]]:
    """The ids as (modality, None) for each of ``media``'s ranges ("image", "video", "audio"), ("special", text) and
    ("text", id stretch)."""
    starts = {r.offset: (modality, r) for modality, found in (media or {}).items() for r in found}
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(ids):
        if i in starts:
            kind, found = starts[i]
            out.append((kind, None))
            i += found.length
            continue
        j = i
        while j < len(ids) and j not in starts and ids[j] not in special_names:
            j += 1
        if j > i:
            out.append(("text", tuple(ids[i:j])))
            i = j
        elif ids[i] in special_names:
            out.append(("special", special_names[ids[i]]))
            i += 1
    return out


def stand_in(family: Adapter, modality: str, token_name: str) -> str:
    """What one item's range stands for in the template's output. A range inside the placeholder text (Qwen: the
    pads between vision start/end) came from the feature token; a range that is the whole expansion came from the
    placeholder itself. Without an adapter, the feature token (``token_name``) stands in; a video's range always
    stands for its feature token."""
    token = family.feature_tokens.get(modality) or token_name
    if modality == "video":
        return token_name
    placeholder = family.placeholders.get(modality) or token
    return token if token and token in placeholder else placeholder


def prompt_text(family: Adapter, ids: Sequence[int], special_names: Mapping[int, str],
                decoded: Mapping[tuple[int, ...], str], media: Mapping[str, Sequence[ItemRange]],
                token_ids: Mapping[str, int]) -> str:
    """The chat template's output before expansion: each item's range back to what it expanded from
    (``stand_in``); ``decoded``: each text stretch's text (the server's); ``token_ids``: each modality's feature
    token."""
    if family.unexpand is not None:  # the expansion merged into the text around it: undo it on the text
        return family.unexpand("".join(value if kind == "special" else decoded.get(value, "")
                                       for kind, value in pieces(ids, special_names)))
    stand_ins = {m: stand_in(family, m, special_names.get(token_ids.get(m, -1), "")) for m in media}
    return "".join(stand_ins[kind] if kind in stand_ins else value if kind == "special" else decoded.get(value, "")
                   for kind, value in pieces(ids, special_names, media))


def geometry(family: Adapter, ids: Sequence[int], media: Mapping[str, Sequence[ItemRange]],
             token_ids: Mapping[str, int], inputs: Mapping[str, Sequence[Any]],
             kwargs: Mapping[str, Any]) -> dict[str, tuple[ItemGeometry, ...]]:
    """Each item's geometry, per modality: from its count of its feature token (the family's
    ``geometry_from_count`` for the modality, with the item's decoded input (a picture; a clip as sent) and the
    kwargs), else none; a video's none."""
    found: dict[str, tuple[ItemGeometry, ...]] = {}
    for modality, ranges in media.items():
        from_count = family.geometry_from_count.get(modality)
        counts = [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token_ids[modality]) for r in ranges]
        items = list(inputs.get(modality, ())) or [None] * len(ranges)
        found[modality] = tuple(
            (from_count(n, item, kwargs) if from_count and n and item is not None else None)
            or no_geometry(item if modality == "image" else None)
            for n, item in zip(counts, items, strict=True))
    return found


PART_MODALITY = {"image_pil": "image", "image_embeds": "image", "video_url": "video", "audio_clip": "audio"}
"""The app's message parts by the modality they carry."""


def template_conversation(messages: Sequence[dict[str, Any]], content_format: str,
                          placeholders: Mapping[str, str]) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to the chat template: media parts as ``{"type": "image"}`` (``"audio"``,
    ...; "openai" format), or each picture's and clip's placeholder (``placeholders``, by modality) before the text
    ("string" format)."""
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(dict(m))
            continue
        if content_format == "openai":
            out.append({"role": m["role"], "content": [
                {"type": "image"} if p.get("type") in ("image_pil", "image_embeds")
                else {"type": "video"} if p.get("type") == "video_url"
                else {"type": "audio"} if p.get("type") == "audio_clip" else p for p in content]})
        else:
            images = [placeholders.get(PART_MODALITY[p["type"]], "") for p in content
                      if p.get("type") in PART_MODALITY and PART_MODALITY[p["type"]] != "video"]
            texts = ["\n".join(p["text"] for p in content if p.get("type") == "text")]
            out.append({"role": m["role"], "content": "\n".join(images + texts)})
    return out


def added_tokens(info: dict[str, Any]) -> dict[int, str]:
    """Id -> text of the tokenizer's added tokens, from ``/tokenizer_info``'s ``added_tokens_decoder``."""
    decoder = info.get("added_tokens_decoder")
    if isinstance(decoder, str):  # vLLM 0.32 sends the dict's repr
        import ast

        try:
            decoder = ast.literal_eval(decoder)
        except (ValueError, SyntaxError):
            decoder = None
    if not isinstance(decoder, dict):
        return {}
    names = {}
    for key, value in decoder.items():
        text = value.get("content") if isinstance(value, dict) else value
        if isinstance(text, str):
            names[int(key)] = text
    return names


def info_specials(info: dict[str, Any] | None) -> list[str]:
    """The named special tokens (bos, eos, pad, unk, extra) in ``/tokenizer_info``."""
    if not info:
        return []
    found = [info.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token", "cls_token", "sep_token",
                                   "mask_token")]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = info.get(key)
        found += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
    return [t for t in found if isinstance(t, str) and t]


def served_chat_template(info: Mapping[str, Any], root: str | None) -> str | None:
    """The chat template a vLLM server renders chats with: its checkpoint's processor's where that has its own (vLLM's
    ``resolve_chat_template`` asks ``AutoProcessor`` before the tokenizer; a processor reads ``chat_template.jinja``
    or ``chat_template.json``, else its class brings a default), read where the checkpoint is a directory on this
    machine (no code of it is run); else the tokenizer's, as ``/tokenizer_info`` gives it. (dots.ocr's two differ: its tokenizer's template takes
    string content, its processor's a list of parts, and the server renders with the processor's.)"""
    if root and Path(root).is_dir():
        jinja, legacy = Path(root) / "chat_template.jinja", Path(root) / "chat_template.json"
        try:
            if jinja.is_file():
                return jinja.read_text()
            if legacy.is_file():
                found = json.loads(legacy.read_text()).get("chat_template")
                if isinstance(found, str) and found:
                    return found
        except (OSError, ValueError, AttributeError):
            pass
        found = _processor_default_template(root)
        if found:
            return found
    template = info.get("chat_template")
    return template if isinstance(template, str) else None


def _processor_default_template(root: str) -> str | None:
    """The template a checkpoint's processor class brings where the checkpoint has none of its own (transformers'
    Qwen2-Audio processor: ``default_chat_template``), as vLLM's server gets it from ``AutoProcessor``; None for a
    processor that needs the checkpoint's own code (not run here) or brings none."""
    configs = [path for name in ("processor_config.json", "preprocessor_config.json")
               if (path := Path(root) / name).is_file()]
    if not configs or any("auto_map" in path.read_text(errors="replace") for path in configs):
        return None
    try:
        from transformers import AutoProcessor

        found = getattr(AutoProcessor.from_pretrained(root, trust_remote_code=False), "chat_template", None)
    except Exception:  # noqa: BLE001 - no processor of its own: the tokenizer's template it is
        return None
    return found if isinstance(found, str) and found else None


def content_format(chat_template: str | None) -> str:
    """The content format vLLM detects for the server's chat template: vLLM's own rule, run here on the
    template the server sent ("unknown" when it sent none)."""
    if not chat_template:
        return "unknown"
    from vllm.renderers.hf import _detect_content_format

    return _detect_content_format(chat_template, default="string")


def rendered_ids(out: Mapping[str, Any]) -> tuple[tuple[int, ...], dict[str, tuple[ItemRange, ...]]]:
    """A render endpoint's answer (``/v1/chat/completions/render``): the expanded ids and each item's range."""
    placed = (out.get("features") or {}).get("mm_placeholders") or {}
    return tuple(int(i) for i in out["token_ids"]), {
        modality: tuple(ItemRange(int(p["offset"]), int(p["length"])) for p in items)
        for modality, items in placed.items() if items}
