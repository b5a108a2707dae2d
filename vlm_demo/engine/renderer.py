"""vLLM's renderer without an engine core: the chat template, the multimodal processor and their expansion
for one model (what ``vllm serve`` does to a chat request before generation), described for the panels.

``Renderer.render`` runs vLLM's own chat renderer step by step; the in-process ``Engine`` (``local.py``) is a
``Renderer`` that also generates from what it rendered. ``printable_only`` says which models sample only
printable tokens (``Renderer.printable_token_ids``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from ..errors import InputError
from ..families import Adapter, ItemGeometry, no_geometry
from ..profile import Profile
from ..registry import ModelSpec, Sampling
from .media_parts import (AUDIO_RATE, _inputs_by_modality, _item_named, _parts,
                          _sampled, _sent_clips, _unwrap_plain_embeds, _with_audio_urls,
                          _with_torch_embeds, with_audio_io)
from .runs import kept_tags, token_runs
from .types import ItemRange, RenderedPrompt


MAX_TOKENS_PER_CHAR = 4
"""Most tokens one character can span (a UTF-8 character has at most 4 bytes; a byte-level tokenizer's worst case)."""

PLAIN_TEXT = frozenset(" \n.,;:!?'\"-()")
"""What a printable-only answer may hold besides letters and digits: spaces, newlines and sentence
punctuation. Markdown and HTML syntax (``* _ ` [ ] < > # | ~ $ \\``) is left out: random text full of it
reads as noise and costs the browser seconds to render as Markdown while it streams."""


def printable_only(spec: ModelSpec, sampling: Sampling | None = None) -> bool:
    """True where the in-process engine samples only printable tokens (``Renderer.printable_token_ids``):
    as ``sampling`` (else the entry's default sampling) says, by default for models with random weights,
    whose answers would otherwise be undecodable bytes. Never for an endpoint entry; a ``vllm serve``
    replaying the request samples from every token."""
    chosen = (sampling or spec.sampling).printable_only
    return (spec.random_weights if chosen is None else chosen) and not spec.remote


def _printable(text: str) -> bool:
    """Whether one token's text reads as plain text: non-empty, letters, digits and ``PLAIN_TEXT`` only."""
    return bool(text) and all(c.isalnum() or c in PLAIN_TEXT for c in text)


class Renderer:
    """vLLM's own chat renderer and multimodal processor for one model (no engine process needed),
    with the family adapter that describes its output. ``render`` is what ``vllm serve`` does to a
    chat request before generation."""

    def __init__(self, spec: ModelSpec, renderer: Any, model_config: Any, adapter: Adapter):
        self.spec = spec
        self.adapter = adapter
        """The family adapter (``GENERIC`` when the model's type has none)."""
        self._renderer = renderer
        self.model_config = model_config
        self.max_model_len: int = model_config.max_model_len

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (for decoding ids in views)."""
        return self._renderer.tokenizer

    def token_runs(self, ids: Sequence[int]) -> tuple[tuple[str, int], ...]:
        """The ids as runs: (special token, repeat count), and the decoded text between them."""
        return token_runs(ids, self._special_names, self.tokenizer.decode)

    def token_texts(self, ids: Sequence[int]) -> dict[int, str]:
        """Each distinct id's own text (the id decoded alone), for the prompt view's hover titles."""
        distinct = sorted(set(ids))
        return dict(zip(distinct, self.tokenizer.batch_decode([[i] for i in distinct]), strict=True))

    def joined_texts(self, ids: Sequence[int], texts: Mapping[int, str]) -> dict[int, tuple[int, str]]:
        """Where a character spans several tokens (each alone decodes to U+FFFD: a byte of a multi-byte UTF-8
        character), the whole character: ``{position: (tokens, text)}`` for the prompt view, which would
        otherwise show a replacement mark per token."""
        joined: dict[int, tuple[int, str]] = {}
        pos = 0
        while pos < len(ids):
            if "\ufffd" in texts.get(ids[pos], "") and ids[pos] not in self._special_names:
                for end in range(pos + 2, min(len(ids), pos + MAX_TOKENS_PER_CHAR) + 1):
                    text = self.tokenizer.decode(ids[pos:end])
                    if "\ufffd" not in text:
                        joined[pos] = (end - pos, text)
                        pos = end - 1
                        break
            pos += 1
        return joined

    @functools.cached_property
    def _special_names(self) -> dict[int, str]:
        ids = self.tokenizer.convert_tokens_to_ids(list(self.special_tokens))
        return {i: self.tokenizer.convert_ids_to_tokens(i) for i in ids if i is not None}

    @functools.cached_property
    def special_tokens(self) -> tuple[str, ...]:
        """Strings the tokenizer turns into special tokens (placeholders, chat markers, ...)."""
        added = getattr(self.tokenizer, "get_added_vocab", lambda: {})()
        return tuple(sorted(set(added) | set(self.tokenizer.all_special_tokens)))

    @functools.cached_property
    def kept_tags(self) -> frozenset[str]:
        """The special tokens answers keep: the family's grounding tags (``runs.kept_tags``)."""
        return kept_tags(self.adapter)

    @functools.cached_property
    def printable_token_ids(self) -> tuple[int, ...]:
        """Ids of the tokens that decode, each alone, to printable text (ordinary spaces and newlines
        allowed, no U+FFFD), less special and added tokens, plus every end-of-sequence id: what a
        random-weight model samples from, so its noise reads as text (``printable_only``)."""
        tokenizer = self.tokenizer
        excluded = set(self._special_names)
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        allowed = {i for i, text in enumerate(texts) if i not in excluded and _printable(text)}
        eos = self.model_config.try_get_generation_config().get("eos_token_id")
        eos_ids = {*(eos if isinstance(eos, list) else [eos]), tokenizer.eos_token_id} - {None}
        return tuple(sorted(allowed | eos_ids))

    @functools.cached_property
    def placeholders(self) -> dict[str, str]:
        """Per modality the model takes, the text standing for one item before expansion: the
        adapter's, else the model's own (vLLM's ``get_placeholder_str``), else its HF processor's."""
        return placeholders(self.model_config, self.adapter, self.modalities)

    async def derived_profile(self, found: Profile) -> Profile:
        """``found`` (the model's profile) with its controls: for an entry that offers none, those derived from its
        processor (``engine.derive_controls``: checked by rendering)."""
        if found.controls_known:
            return found
        from .derive_controls import derive

        derived = await derive(self)
        return found.with_derived(derived.controls, derived.values, derived.dicts, derived.scoped, derived.aliases)

    @functools.cached_property
    def modalities(self) -> tuple[str, ...]:
        """The modalities the engine accepts ("image", "video", ...), as its prompt limits say."""
        config = self.model_config.multimodal_config
        return tuple(m for m in ("image", "video", "audio")
                     if _supports(self.model_config, m) and config.get_limit_per_prompt(m) > 0)

    @functools.cached_property
    def audio_rate(self) -> int:
        """Samples a second the model's feature extractor takes (a clip is resampled to it here: ``Audio.at``)."""
        from vllm.multimodal import MULTIMODAL_REGISTRY

        with contextlib.suppress(Exception):  # (a processor without a feature extractor)
            info = MULTIMODAL_REGISTRY.create_processor(self.model_config).info
            return int(info.get_hf_processor().feature_extractor.sampling_rate)
        return AUDIO_RATE

    @functools.cached_property
    def content_format(self) -> str:
        """The chat template content format renders go with: the entry's where it names one; else vLLM's detection,
        but "string" where the template, given the detected "openai" parts, would drop a clip's placeholder
        (Qwen2-Audio's checks ``'audio' in content``, a key vLLM's parts do not have: the clip then fails in vLLM's
        processor, "Failed to apply prompt replacement"). Under "string" vLLM writes each placeholder itself."""
        given = self.spec.chat_template_content_format
        if given != "auto" or "audio" not in self.modalities:
            return given
        from vllm.renderers.hf import resolve_chat_template_content_format, safe_apply_chat_template

        detected = resolve_chat_template_content_format(
            chat_template=None, tools=None, given_format="auto", tokenizer=self._renderer.tokenizer,
            model_config=self.model_config)
        if detected != "openai":
            return given
        marks = [t for t in self.special_tokens if t in self.placeholders.get("audio", "")]
        try:
            shown = safe_apply_chat_template(  # (the template vLLM renders with: the processor's, else the tokenizer's)
                self.model_config, self.tokenizer,
                [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "?"}]}],
                tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template that cannot render this probe: vLLM's detection stands
            return given
        return "string" if marks and not any(m in shown for m in marks) else given

    async def render(self, messages: Sequence[dict[str, Any]], mm_kwargs: dict[str, Any],
                     media_io: Mapping[str, Mapping[str, Any]] | None = None) -> RenderedPrompt:
        """Apply the chat template and run the multimodal processor, as ``vllm serve`` does (``engine_input``),
        and describe the result: each item's range, geometry and feature token. ``media_io``: per-request
        media loading options (``{"video": {"num_frames": 8}}``), the request body's ``media_io_kwargs``;
        vLLM's own loader decodes and samples each video with them.
        """
        from vllm.renderers.hf import resolve_chat_template_content_format

        kwargs = dict(mm_kwargs)
        clips = _sent_clips(messages, self.audio_rate) if "audio" in self.modalities else ()
        messages = [_with_audio_urls(_with_torch_embeds(m), self.audio_rate) for m in messages]
        if any(p.get("type") == "audio_url" for m in messages for p in _parts(m)):  # (the app's WAVs: libsndfile's,
            media_io = with_audio_io(media_io, kwargs)                                # no probing)
        try:
            conversation, prompt_text, engine_input, frames = await self._engine_input(messages, kwargs, media_io)
        except InputError as exc:
            if "too short to be represented" not in str(exc) or not clips:
                raise
            short = min(clips, key=lambda c: c.seconds)  # (vLLM's message holds the samples themselves)
            raise InputError(f"{short.name} ({short.seconds:.2f} s) is too short for {self.spec.name} to hear: it "
                             "would be no token at all") from None
        content_format = resolve_chat_template_content_format(
            chat_template=None, tools=None, given_format=self.content_format,
            tokenizer=self._renderer.tokenizer, model_config=self.model_config,
        )
        ids = tuple(engine_input["prompt_token_ids"])
        inputs = _inputs_by_modality(messages)
        inputs["video"] = [f.first if f else None for f in frames["video"]]
        ranges, geometry, token_ids = self._items(engine_input, ids, inputs, kwargs)
        # the note speaks of the image rule (the tiles or grid drawn over an image)
        note = (None if "image" in self.adapter.geometry or "image" not in self.modalities
                else f"no geometry adapter for {self.model_config.hf_config.model_type}")
        return RenderedPrompt(
            model=self.spec.name,
            family=self.adapter.name,
            content_format=content_format,
            conversation=tuple(conversation),
            prompt=prompt_text,
            prompt_token_ids=ids,
            ranges=ranges,
            geometry=geometry,
            token_ids=token_ids,
            placeholders={m: self.placeholders.get(m, "") for m in ranges},
            geometry_note=note,
            mm_kwargs=kwargs,
            max_model_len=self.max_model_len,
            engine_input=engine_input,
            media_io_kwargs={m: dict(v) for m, v in (media_io or {}).items()},
            frames={**{m: tuple(f.sampled if f else None for f in found) for m, found in frames.items() if found},
                    **({"audio": clips} if clips else {})},
        )

    async def _engine_input(self, messages: Sequence[dict[str, Any]], kwargs: dict[str, Any],
                            media_io: Mapping[str, Mapping[str, Any]] | None) -> tuple[list[Any], str, Any, dict]:
        """The steps of vLLM's ``render_chat_async``, called one by one so the template's text output (before
        placeholder expansion) can be shown too; the per-request processor kwargs travel with the prompt, as
        the OpenAI server passes them. Returns the template's conversation, its text, the engine input and
        each video's sampled frames (``{"video": (_Decoded | None, ...)}``)."""
        from vllm.exceptions import VLLMValidationError

        renderer = self._renderer
        try:
            params = chat_params(kwargs, media_io, self.content_format)
            conversation, dict_prompt = await renderer.render_messages_async(messages, params)
            _unwrap_plain_embeds(dict_prompt)
            videos = dict_prompt.get("multi_modal_data", {}).get("video") or ()
            # small copies of the sampled frames, made off the event loop (64 4K frames take a while)
            frames = {"video": await asyncio.to_thread(lambda: tuple(_sampled(v) for v in videos)) if videos else ()}
            # As the OpenAI server's chat request builds them: no special tokens beyond the template's
            # (vLLM's own default for multimodal models adds them, and Gemma 3 then starts with two
            # <bos>); no length limit here: the service refuses an over-long prompt with its exact count.
            tok_params = dataclasses.replace(renderer.default_chat_tok_params, max_total_tokens=None,
                                             add_special_tokens=False)
            (tok_prompt,) = await renderer.tokenize_prompts_async([dict_prompt], tok_params)
            if kwargs:  # what render_chat_async's prompt_extras does with the server's mm_processor_kwargs
                tok_prompt["mm_processor_kwargs"] = kwargs
            # ... and with the request's media_io_kwargs: they are part of each item's cache key (a clip
            # sampled at 4 frames must not be served the processing of the same clip at 8)
            tok_prompt["media_io_kwargs"] = {m: dict(v) for m, v in (media_io or {}).items()}
            # skip_mm_cache: processed images still come from the processor cache, but are not marked
            # as "already sent" to the engine core. A render that is never generated from (inspect
            # only, a prompt over max_model_len, Stop right after rendering) would otherwise leave
            # the two caches out of step, and a later request with the same image would fail.
            engine_input = await renderer.process_for_engine_async(tok_prompt, time.time(), skip_mm_cache=True)
        except (VLLMValidationError, ValueError) as exc:
            raise InputError(f"{self.spec.name}: {exc}") from None
        except AssertionError as exc:  # (vLLM asserts that each item found its placeholder in the template's text)
            if "prompt replacement" not in str(exc):
                raise
            raise InputError(f"{self.spec.name}: the chat template left out the placeholder of {_item_named(exc)} "
                             f"(vLLM: {exc}); its entry's chat_template_content_format may need to be \"string\""
                             ) from None
        return conversation, dict_prompt.get("prompt", ""), engine_input, frames

    def _items(self, engine_input: Any, ids: Sequence[int], inputs: Mapping[str, Sequence[Any]],
               kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
        """Per modality in vLLM's expansion: the items' ranges, their geometry (the adapter's rule on each
        item's processor output and decoded input) and the feature token's id."""
        ranges, geometry, token_ids = {}, {}, {}
        for modality, found in engine_input.get("mm_placeholders", {}).items():
            ranges[modality] = tuple(ItemRange(p.offset, p.length) for p in found)
            token_ids[modality] = self._feature_token_id(modality, ids, found)
            items = engine_input.get("mm_kwargs", {}).get(modality, [])
            rule = self.adapter.geometry.get(modality)
            # (an item of vLLM's may have no part of its own: a video's own sound, ``use_audio_in_video``)
            sources = [*inputs.get(modality, []), *[None] * max(0, len(items) - len(inputs.get(modality, [])))]
            geometry[modality] = tuple(self._geometry(item, source, kwargs, rule)
                                       for item, source in zip(items, sources, strict=True))
        return ranges, geometry, token_ids

    def _feature_token_id(self, modality: str, ids: Sequence[int], found: Sequence[Any]) -> int:
        """The adapter's feature token where it names one, else the id that fills the items' embed
        positions (``PlaceholderRange.is_embed``) in vLLM's expansion."""
        token = self.adapter.feature_tokens.get(modality)
        if token:
            return self.tokenizer.convert_tokens_to_ids(token)
        counts: Counter[int] = Counter()
        for p in found:
            mask = p.is_embed.tolist() if p.is_embed is not None else [True] * p.length
            counts.update(ids[p.offset + i] for i, embed in enumerate(mask) if embed)
        return counts.most_common(1)[0][0] if counts else -1

    def _geometry(self, item: Any, source: Any, kwargs: dict[str, Any], rule: Any) -> ItemGeometry:
        image = source if isinstance(source, Image.Image) else None
        if rule is None:
            return no_geometry(image)
        fields = {key: elem.data for key, elem in item.items()}
        try:
            found = rule(fields, image, self.model_config.hf_config, kwargs)
        except (KeyError, AttributeError, ValueError, TypeError, IndexError):  # a field this input lacks
            found = None
        return found or no_geometry(image)


def _supports(model_config: Any, modality: str) -> bool:
    """Whether vLLM's model class takes ``modality`` (it has a placeholder or a processor for it)."""
    from vllm.multimodal import MULTIMODAL_REGISTRY

    try:
        info = MULTIMODAL_REGISTRY.create_processor(model_config).info
        return modality in info.get_supported_mm_limits()
    except Exception:  # noqa: BLE001 - a processor that cannot even be built takes nothing
        return False


def placeholders(model_config: Any, adapter: Adapter, modalities: Sequence[str]) -> dict[str, str]:
    """Per modality, the text standing for one item in the template's output before expansion."""
    from vllm.model_executor.model_loader import get_model_cls

    found: dict[str, str] = {}
    for modality in modalities:
        text = adapter.placeholders.get(modality)
        if not text:
            with contextlib.suppress(Exception):  # some models raise for a modality they lack
                text = get_model_cls(model_config).get_placeholder_str(modality, 1)
        if not text:
            from vllm.multimodal import MULTIMODAL_REGISTRY

            processor = MULTIMODAL_REGISTRY.create_processor(model_config).info.get_hf_processor()
            text = getattr(processor, f"{modality}_token", None)
        if text:
            found[modality] = text
    return found


def chat_params(mm_kwargs: dict[str, Any], media_io: Mapping[str, Mapping[str, Any]] | None = None,
                content_format: str = "auto") -> Any:
    """The ``ChatParams`` vLLM's OpenAI server builds for a plain chat request with these kwargs (and a
    request body's ``media_io_kwargs``), started with ``--chat-template-content-format content_format``."""
    from vllm.renderers import ChatParams

    return ChatParams(
        chat_template_content_format=content_format,
        chat_template_kwargs={"add_generation_prompt": True, "continue_final_message": False, "tokenize": False},
        mm_processor_kwargs=dict(mm_kwargs) or None,
        media_io_kwargs={m: dict(v) for m, v in media_io.items()} if media_io else None,
    )
