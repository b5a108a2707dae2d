"""The in-process engine: vLLM's ``AsyncLLM``, one per model.

``EngineManager`` keeps one ``AsyncLLM`` per model name, created on first use and shared by every
request; starting a model beyond ``Settings.max_engines`` shuts the least recently used one down.
``Engine.render`` runs vLLM's own chat renderer (the path ``vllm serve`` uses) and
``Engine.stream`` generates from that very rendered input.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import psutil
from PIL import Image

from .. import families
from ..errors import EngineBusyError, EngineDiedError, EngineStartError, InputError, VlmDemoError
from ..families import Adapter, ItemGeometry, no_geometry
from ..profile import Profile, profile, remember_derived
from ..registry import AUTO, EngineArgs, ModelSpec, Sampling
from ..settings import RENDERERS_KEPT, Settings
from ..tiny_models import tiny_model_dir
from .reasoning import ReasoningSplit, reasoning_parser_class
from .processes import (cpu_preload, descendants, engine_log_file, environment, has_gpu, logged_error, processes,
                        shared_memory, unlink_shared_memory)
from .remote import RemoteEngine
from .runs import token_runs, without_other_specials
from .types import ItemRange, RenderedPrompt, SampledFrames, TokenDelta
from .workarounds import apply_workarounds, start_kwargs

log = logging.getLogger(__name__)

EngineState = Literal["not loaded", "loading", "ready"]


@dataclasses.dataclass(frozen=True)
class StartProgress:
    """Where a starting engine stands (what the page shows while a person waits for it)."""

    phase: str
    """What the start is doing now, in words ("downloading Qwen/Qwen2.5-VL-3B-Instruct", "starting vLLM's engine
    processes (weights, memory profiling)")."""
    since: float
    """When the start began (``time.monotonic()``)."""
    bytes_done: int = 0
    """Bytes fetched so far (a Hub download; 0 otherwise)."""
    bytes_total: int = 0
    """Bytes to fetch as known so far (a Hub download; 0 otherwise)."""

    @property
    def elapsed_s(self) -> float:
        """Seconds since the start began."""
        return time.monotonic() - self.since

    def text(self) -> str:
        """"starting vLLM's engine processes (weights, memory profiling) · 12 s" (with "· 1.2 of 6.0 GB" while
        downloading)."""
        fetched = (f" · {self.bytes_done / 1e9:.2f} of {self.bytes_total / 1e9:.2f} GB" if self.bytes_total
                   else "")
        return f"{self.phase}{fetched} · {self.elapsed_s:.0f} s"


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
        """Special tokens the family's grounding format writes (InternVL's ``<ref>``/``<box>``, Qwen2-VL's box
        tokens): answers keep them (vLLM's ``skip_special_tokens=False``), and no other special token."""
        grounding = self.adapter.grounding
        return frozenset(grounding.tags) if grounding else frozenset()

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

    async def derived_profile(self) -> Profile:
        """The model's profile with its controls: for an entry that offers none, those derived from its
        processor (``engine.controls``: checked by rendering, once a model)."""
        found = profile(self.spec)
        if found.controls_known:
            return found
        from .controls import derive

        derived = await derive(self)
        return remember_derived(self.spec, derived.controls, derived.values, derived.dicts, derived.scoped)

    @functools.cached_property
    def modalities(self) -> tuple[str, ...]:
        """The modalities the engine accepts ("image", "video", ...), as its prompt limits say."""
        config = self.model_config.multimodal_config
        return tuple(m for m in ("image", "video")
                     if _supports(self.model_config, m) and config.get_limit_per_prompt(m) > 0)

    async def render(self, messages: Sequence[dict[str, Any]], mm_kwargs: dict[str, Any],
                     media_io: Mapping[str, Mapping[str, Any]] | None = None) -> RenderedPrompt:
        """Apply the chat template and run the multimodal processor, as ``vllm serve`` does.

        These are the steps of vLLM's ``render_chat_async``, called one by one so the template's
        text output (before placeholder expansion) can be shown too; the per-request processor
        kwargs travel with the prompt, as the OpenAI server passes them. ``media_io``: per-request
        media loading options (``{"video": {"num_frames": 8}}``), the request body's ``media_io_kwargs``;
        vLLM's own loader decodes and samples each video with them.
        """
        from vllm.exceptions import VLLMValidationError
        from vllm.renderers.hf import resolve_chat_template_content_format

        renderer = self._renderer
        kwargs = dict(mm_kwargs)
        messages = [_with_torch_embeds(m) for m in messages]
        try:
            conversation, dict_prompt = await renderer.render_messages_async(messages, chat_params(kwargs, media_io))
            _unwrap_plain_embeds(dict_prompt)
            videos = dict_prompt.get("multi_modal_data", {}).get("video") or ()
            # small copies of the sampled frames, made off the event loop (64 4K frames take a while)
            frames = {"video": await asyncio.to_thread(lambda: tuple(_sampled(v) for v in videos)) if videos else ()}
            prompt_text = dict_prompt.get("prompt", "")
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
        content_format = resolve_chat_template_content_format(
            chat_template=None, tools=None, given_format="auto",
            tokenizer=renderer.tokenizer, model_config=self.model_config,
        )
        ids = tuple(engine_input["prompt_token_ids"])
        inputs = _inputs_by_modality(messages)
        inputs["video"] = [f.first if f else None for f in frames["video"]]
        ranges, geometry, token_ids = {}, {}, {}
        for modality, found in engine_input.get("mm_placeholders", {}).items():
            ranges[modality] = tuple(ItemRange(p.offset, p.length) for p in found)
            token_ids[modality] = self._feature_token_id(modality, ids, found)
            items = engine_input.get("mm_kwargs", {}).get(modality, [])
            rule = self.adapter.geometry.get(modality)
            geometry[modality] = tuple(self._geometry(item, source, kwargs, rule)
                                       for item, source in zip(items, inputs.get(modality, []), strict=True))
        # the note speaks of the image rule (the tiles or grid drawn over an image)
        note = (None if "image" in self.adapter.geometry
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
            frames={m: tuple(f.sampled if f else None for f in found) for m, found in frames.items() if found},
        )

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


class Engine(Renderer):
    """One running vLLM engine for one model: its renderer, and generation from what it rendered."""

    def __init__(self, spec: ModelSpec, llm: Any, adapter: Adapter, child_pids: frozenset[int],
                 shared_memory: frozenset[str] = frozenset()):
        super().__init__(spec, llm.renderer, llm.model_config, adapter)
        self._llm = llm
        self.child_pids = child_pids
        """Processes this engine started (its engine core); all end at shutdown."""
        self.shared_memory = shared_memory
        """Names of the shared-memory segments its processes created (vLLM's message queues between
        engine core and worker); removed at shutdown where a killed process left them behind."""

    @property
    def dead(self) -> bool:
        """True once the engine core has died."""
        return self._llm is None or bool(self._llm.errored)

    def running_requests(self) -> int:
        """Requests the engine holds right now (0 when idle)."""
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    @functools.cached_property
    def prefix_cache_block(self) -> int | None:
        """Tokens per KV-cache block when vLLM's prefix cache is on (cache hits come in whole blocks),
        else None."""
        cache = self._llm.vllm_config.cache_config
        return cache.block_size if cache.enable_prefix_caching else None

    async def stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
        """Generate from ``rendered``; closing the iterator early aborts the vLLM request."""
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams
        from vllm.v1.engine.exceptions import EngineDeadError

        split = (ReasoningSplit(self.reasoning_parser_class, self.tokenizer, self.model_config)
                 if self.spec.reasoning_parser else None)
        # A regex request skips the printable-only set: that set lacks added tokens such as <think> and
        # </think>, so the grammar's markers could only be spelled byte by byte (vLLM's parsers read the
        # marker tokens, not their text); the grammar keeps such output to its text anyway.
        printable = printable_only(self.spec, sampling) and sampling.regex is None
        params = SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
            seed=sampling.seed, ignore_eos=sampling.ignore_eos,
            output_kind=RequestOutputKind.DELTA,
            allowed_token_ids=list(self.printable_token_ids) if printable else None,
            structured_outputs=StructuredOutputsParams(regex=sampling.regex) if sampling.regex is not None else None,
            skip_special_tokens=split.skip_special_tokens if split else not self.kept_tags,
        )
        for attempt in (1, 2):
            request_id = f"vlm-demo-{uuid.uuid4().hex}"
            engine_input, hashes = self._for_engine_core(rendered.engine_input)
            finished = reached = False
            try:
                async with contextlib.aclosing(self._llm.generate(engine_input, params, request_id)) as outs:
                    first = True
                    async for out in outs:
                        completion = out.outputs[0]
                        finished = out.finished
                        if (first and attempt == 1 and hashes and finished and completion.finish_reason == "error"
                                and not completion.token_ids):
                            break  # the core lacked an item the sender cache counted on: resent below, with data
                        reached = True
                        prompt_ids = tuple(out.prompt_token_ids) if first and out.prompt_token_ids else None
                        first = False
                        text, reasoning, reasoning_tokens = without_other_specials(completion.text, self.special_tokens, self.kept_tags), "", 0
                        if split is not None:
                            reasoning, text, reasoning_tokens = split.feed(
                                completion.text, completion.token_ids, prompt_ids, finished=out.finished)
                        yield TokenDelta(text, len(completion.token_ids), completion.finish_reason, prompt_ids,
                                         num_cached_tokens=out.num_cached_tokens, reasoning=reasoning,
                                         reasoning_tokens=reasoning_tokens)
            except (VLLMClientError, ValueError) as exc:  # a request vLLM refuses (e.g. a regex it cannot compile)
                text = " ".join(str(exc).split())
                raise InputError(f"{self.spec.name}: {text if len(text) <= 300 else text[:299] + '…'}") from None
            except EngineDeadError as exc:
                raise EngineDiedError(
                    f"the {self.spec.name} engine stopped ({exc}); the next request restarts it") from None
            finally:
                if not finished and not self.dead:
                    await self._llm.abort(request_id)
                if not reached:  # it may not have reached the core: the items go again with their data next time
                    self._forget(hashes)
            if reached:
                return

    def _for_engine_core(self, engine_input: Any) -> tuple[Any, tuple[str, ...]]:
        """``engine_input`` as ``vllm serve`` sends it to the engine core: an item the core already holds
        (vLLM's processor cache, mirrored on both sides) goes as its hash alone, not its tensors again. Each
        turn of a chat re-sends every earlier image; rendered with ``skip_mm_cache`` (so the panels see every
        item's tensors), each would otherwise cross to the core in full again. Returns the input and its
        items' hashes."""
        from vllm.multimodal.inputs import MultiModalKwargsItems

        found = engine_input.get("mm_kwargs") if engine_input.get("type") == "multimodal" else None
        if not found or self._llm.input_processor.renderer.mm_processor_cache is None:
            return engine_input, ()
        # A copy: the render keeps its tensors (the panels, a retry); vLLM's own call for pre-processed items
        items = MultiModalKwargsItems({modality: list(v) for modality, v in found.items()})
        self._llm.input_processor.inject_into_mm_cache(engine_input["mm_hashes"], items)
        hashes = tuple(h for found_hashes in engine_input["mm_hashes"].values() for h in found_hashes)
        return {**engine_input, "mm_kwargs": items}, hashes

    def _forget(self, hashes: tuple[str, ...]) -> None:
        """Drop ``hashes`` from the sender side of vLLM's processor cache (always safe: an item is sent again
        with its data, and the core replaces what it holds)."""
        cache = self._llm.input_processor.renderer.mm_processor_cache if self._llm is not None else None
        for mm_hash in hashes if cache is not None else ():
            cache.invalidate(mm_hash)

    @functools.cached_property
    def reasoning_parser_class(self) -> Any:
        """vLLM's parser for the entry's ``reasoning_parser``, checked against the tokenizer (None without)."""
        name = self.spec.reasoning_parser
        return reasoning_parser_class(name, self.tokenizer, self.model_config.model) if name else None

    def shutdown(self, grace_s: float | None = None) -> None:
        """Stop the engine and wait until its processes have ended. ``grace_s``: how long vLLM lets its
        engine core end on its own before it kills the core's process tree (None: vLLM's default, 5 s)."""
        if self._llm is None:
            return
        _stop_output_handler(self._llm)
        self._llm.shutdown(timeout=grace_s)
        self._llm = None  # collected now, not at interpreter exit (where vLLM's __del__ fails)
        # Ctrl-C also reaches the engine's own processes: a core that ended on it leaves vLLM nothing to kill,
        # and its worker, ending on its own, can take 5 s or more; ours get the same grace, then are killed.
        _, alive = psutil.wait_procs(processes(self.child_pids), timeout=30 if grace_s is None else grace_s)
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=5)
        unlink_shared_memory(self.shared_memory)


def _stop_output_handler(llm: Any, wait_s: float = 2.0) -> None:
    """Cancel the ``AsyncLLM``'s output handler task before its engine core is shut down. vLLM 0.32's
    ``AsyncLLM.shutdown`` stops the core first, and the handler, waiting on the core, then logs "AsyncLLM
    output_handler failed" with an ``EngineDeadError`` traceback before its cancellation arrives (every model
    switch put a traceback in the app's log). From another thread than the handler's loop (a switch shuts the old
    engine down in a worker thread) this waits until the cancellation has been delivered."""
    handler = getattr(llm, "output_handler", None)
    if handler is None or handler.done():
        return
    loop = handler.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop or not loop.is_running():
        handler.cancel()  # delivered before the handler runs again: it cannot run until this thread yields
        return

    async def cancel() -> None:
        handler.cancel()
        await asyncio.wait({handler}, timeout=wait_s)
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(cancel(), loop).result(timeout=wait_s + 1)


def _with_torch_embeds(message: dict[str, Any]) -> dict[str, Any]:
    """The message with image-embedding arrays (numpy, from media intake) as torch tensors."""
    content = message.get("content")
    if not isinstance(content, list) or not any(p.get("type") == "image_embeds" for p in content):
        return message
    import torch

    parts = [{**p, "image_embeds": {k: torch.from_numpy(v) for k, v in p["image_embeds"].items()}}
             if p.get("type") == "image_embeds" else p for p in content]
    return {**message, "content": parts}


def _inputs_by_modality(messages: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The decoded inputs of the messages' media parts, per modality, in prompt order (vLLM numbers
    items per modality in the order the parts come)."""
    found: dict[str, list[Any]] = {}
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type", "")
            if kind in ("image_pil", "image_embeds"):
                found.setdefault("image", []).append(part.get("image_pil"))
    return found


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


def _unwrap_plain_embeds(prompt: dict[str, Any]) -> None:
    """Embeddings that are one tensor (LLaVA) go to the engine as that tensor, as vLLM's server
    passes a tensor-only ``image_embeds``; the chat parser takes tensors only inside a dict."""
    data = prompt.get("multi_modal_data", {}).get("image")
    if isinstance(data, dict) and set(data) == {"image_embeds"}:
        prompt["multi_modal_data"]["image"] = data["image_embeds"]


def chat_params(mm_kwargs: dict[str, Any], media_io: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """The ``ChatParams`` vLLM's OpenAI server builds for a plain chat request with these kwargs (and a
    request body's ``media_io_kwargs``)."""
    from vllm.renderers import ChatParams

    return ChatParams(
        chat_template_kwargs={"add_generation_prompt": True, "continue_final_message": False, "tokenize": False},
        mm_processor_kwargs=dict(mm_kwargs) or None,
        media_io_kwargs={m: dict(v) for m, v in media_io.items()} if media_io else None,
    )


THUMBNAIL_PX = 256
"""Longest side of a sampled video frame kept for the contact sheet."""


@dataclasses.dataclass(frozen=True)
class _Decoded:
    sampled: SampledFrames
    first: Image.Image
    """The first sampled frame at full size (the video's geometry reads its size)."""


def _sampled(video: Any) -> _Decoded | None:
    """What vLLM's video loader gave for one video (``MediaWithBytes`` of ``(frames, metadata)``): the
    sampled frames' indices and times, and small copies of the frames."""
    frames, meta = getattr(video, "media", video)
    indices = tuple(int(i) for i in meta.get("frames_indices") or range(len(frames)))
    fps = float(meta.get("fps") or 0.0)
    array = frames.cpu().numpy() if hasattr(frames, "cpu") else frames
    if len(array) == 0:
        return None
    thumbnails = []
    for frame in array:
        picture = Image.fromarray(frame)
        picture.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        thumbnails.append(picture)
    return _Decoded(SampledFrames(
        indices=indices,
        timestamps_s=tuple(i / fps if fps > 0 else 0.0 for i in indices),
        total_frames=int(meta.get("total_num_frames") or len(indices)),
        fps=fps,
        duration_s=float(meta.get("duration") or 0.0),
        thumbnails=tuple(thumbnails),
    ), Image.fromarray(array[0]))


class EngineManager:
    """Starts, shares and stops engines: at most ``settings.max_engines`` alive at once. Endpoint
    entries get a ``RemoteEngine`` (no process, outside that count and the switch policy)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._remote: dict[str, RemoteEngine] = {}
        self._loading: dict[str, StartProgress] = {}
        """The engines starting now, with where each stands."""
        self._renderers: OrderedDict[str, Renderer] = OrderedDict()
        """Renderers without an engine, most recently used last (``RENDERERS_KEPT`` at most)."""
        self._lock = asyncio.Lock()
        self._starts: dict[str, asyncio.Future[Engine]] = {}
        """Each model's engine start in progress (or last ended), which callers share."""
        self.starts = 0
        """How many engines this manager has started (tests check singletons with it)."""

    def state(self, name: str) -> EngineState | str:
        """Whether the model's engine is not loaded, loading or ready ("remote: URL" for an endpoint)."""
        if name in self._remote:
            return f"remote: {self._remote[name].url}"
        if name in self._loading:
            return "loading"
        return "ready" if name in self._engines else "not loaded"

    def progress(self, name: str) -> StartProgress | None:
        """Where the start of the model's engine stands, while it starts; None otherwise."""
        return self._loading.get(name)

    def _phase(self, name: str, phase: str, **fields: int) -> None:
        """Note the phase a start has reached (called from the start's worker thread too)."""
        found = self._loading.get(name)
        if found is not None:
            self._loading[name] = dataclasses.replace(found, phase=phase, **fields)

    def running_requests(self) -> int:
        """Requests all running engines hold right now (0 when idle)."""
        return sum(engine.running_requests() for engine in self._engines.values())

    def loaded(self) -> list[str]:
        """Names of the models whose engines are running, least recently used first."""
        return list(self._engines)

    async def get(self, spec: ModelSpec) -> Engine | RemoteEngine:
        """The running engine of ``spec``, started on first use (once, however many ask at once); for an
        endpoint entry, the remote engine once its server has answered."""
        if spec.remote:
            remote = self._remote.get(spec.name)
            if remote is None or remote.spec != spec:
                remote = RemoteEngine(spec, self.settings)
            await remote.connect()  # an unreachable server raises RemoteError, and the next call asks again
            self._remote[spec.name] = remote
            return remote
        engine = self._engines.get(spec.name)
        if engine is not None and not engine.dead:
            self._engines.move_to_end(spec.name)
            return engine
        # The start runs as its own task: a caller that goes away (Stop, a closed tab) stops waiting for it, not
        # the start itself, which would otherwise leave an engine's processes running that nothing knows of.
        task = self._starts.get(spec.name)
        if task is None or task.done():
            task = self._starts[spec.name] = asyncio.ensure_future(self._get_locked(spec))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # each caller sees its error
        return await asyncio.shield(task)

    def running(self, spec: ModelSpec) -> Engine | None:
        """The model's engine if it is started and alive (no start, no wait); None otherwise."""
        engine = self._engines.get(spec.name)
        return engine if engine is not None and not engine.dead else None

    async def _get_locked(self, spec: ModelSpec) -> Engine:
        """Start ``spec``'s engine (one start at a time), switching out the least recent one where the limit
        says so; where the start stands is ``progress(spec.name)`` meanwhile."""
        self._loading[spec.name] = StartProgress("waiting for another engine's start to end", time.monotonic())
        try:
            async with self._lock:
                engine = self._engines.get(spec.name)
                if engine is not None and engine.dead:
                    await asyncio.to_thread(engine.shutdown)
                    del self._engines[spec.name]
                    engine = None
                if engine is None:
                    self._phase(spec.name, "starting")
                    while len(self._engines) >= self.settings.max_engines:
                        old_name, old = next(iter(self._engines.items()))
                        self._phase(spec.name, f"waiting for {old_name}'s requests to end")
                        await self._wait_idle(old, spec.name)
                        self._phase(spec.name, f"stopping {old_name}'s engine")
                        del self._engines[old_name]
                        await asyncio.to_thread(old.shutdown)
                    engine = await asyncio.to_thread(self._start, spec)
                    self._engines[spec.name] = engine
                    self.starts += 1
                self._engines.move_to_end(spec.name)
                return engine
        finally:
            self._loading.pop(spec.name, None)

    async def _wait_idle(self, engine: Engine, wanted: str) -> None:
        """Switch policy: wait up to ``switch_wait_s`` for the engine to finish others' requests."""
        deadline = time.monotonic() + self.settings.switch_wait_s
        while (busy := engine.running_requests()) and not engine.dead:
            if time.monotonic() >= deadline:
                raise EngineBusyError(
                    f"cannot switch to {wanted} now: {engine.spec.name} is answering {busy} request(s) of "
                    f"other users (waited {self.settings.switch_wait_s:.0f} s); try again in a moment")
            await asyncio.sleep(0.2)

    def engine(self, name: str) -> Engine | RemoteEngine | None:
        """The running engine of model ``name``, if any."""
        return self._engines.get(name) or self._remote.get(name)

    def special_tokens(self, name: str) -> tuple[str, ...]:
        """Special-token strings of the model's tokenizer, or () when its engine is not running."""
        engine = self.engine(name)
        return engine.special_tokens if engine else ()

    async def shutdown(self, name: str) -> None:
        """Stop one model's engine, if it runs."""
        remote = self._remote.pop(name, None)
        if remote is not None:
            await remote.aclose()
        async with self._lock:
            engine = self._engines.pop(name, None)
            if engine is not None:
                await asyncio.to_thread(engine.shutdown)

    def shutdown_all(self, grace_s: float | None = None) -> None:
        """Stop every engine (at exit); ``grace_s`` as ``Engine.shutdown``'s."""
        while self._engines:
            _, engine = self._engines.popitem()
            engine.shutdown(grace_s)
        while self._remote:
            self._remote.popitem()[1].shutdown()

    def _config(self, spec: ModelSpec, report: Any = None, weights: bool = True) -> tuple[Adapter, Any]:
        """The model's family adapter and vLLM config (what the engine and its renderer are built from);
        ``report(phase, **bytes)`` hears where it stands (an engine's start); ``weights=False``: a renderer's, for
        which a Hub checkpoint's weights are not fetched."""
        report = report or (lambda phase, **fields: None)
        from vllm.engine.arg_utils import AsyncEngineArgs

        model = self.model_path(spec, report, weights)
        report("reading the model's configuration")
        adapter = resolve_adapter(spec, model)
        kwargs = self.engine_kwargs(spec, model)
        if spec.repo:  # a downloaded snapshot directory: keep the hub name in logs and the API
            kwargs["served_model_name"] = spec.repo
        try:
            if kwargs.get("enable_chunked_prefill") is False and spec.engine_args.enable_chunked_prefill is None:
                if AsyncEngineArgs(model=model, **kwargs).create_model_config().is_hybrid:
                    kwargs = hybrid_on_cpu(kwargs)
            config = AsyncEngineArgs(model=model, **kwargs).create_engine_config()
        except Exception as exc:  # vLLM raises many kinds; the user needs the cause in one line
            raise EngineStartError(f"could not start {spec.name} ({model}): {_root_cause(exc)}") from exc
        if not config.model_config.is_multimodal_model:
            archs = ", ".join(config.model_config.architectures or ["?"])
            raise EngineStartError(f"{spec.name}: {archs} is not a multimodal model in vLLM; this app needs a "
                                   "model that takes images")
        return adapter, config

    async def derived_profile(self, spec: ModelSpec) -> Profile:
        """``spec``'s profile with its controls known: for an entry and family that offer none, those derived
        from the model's processor (``engine.controls``, once). A remote model's come from the checkpoint its
        server says it serves (``/v1/models`` ``root``): a directory here, or a Hub id whose config, tokenizer and
        processor files are fetched (no weights); where that cannot be had, none, and what the person types
        goes to the server as it is."""
        found = profile(spec)
        if found.controls_known:
            return found
        if not spec.remote:
            return await (await self.renderer(spec)).derived_profile()  # type: ignore[union-attr]
        remote = await self.get(spec)  # connected: its root names the checkpoint (an auto entry's family too)
        found = profile(spec)
        if found.controls_known:
            return found
        from .controls import derive

        try:
            reference = await asyncio.to_thread(self.reference_renderer, spec, remote)
            derived = await derive(reference)
        except VlmDemoError as exc:
            log.warning("%s: no controls derived (%s); per-request settings go to the server as typed", spec.name,
                        exc)
            return remember_derived(spec, (), {}, {})
        return remember_derived(spec, derived.controls, derived.values, derived.dicts, derived.scoped)

    def reference_renderer(self, spec: ModelSpec, remote: RemoteEngine) -> Renderer:
        """vLLM's renderer of the checkpoint ``remote`` serves, built here from its files (no engine, no weights):
        a directory on this machine, else a Hub id's config, tokenizer and processor files."""
        from .. import hub

        if not remote.root:
            raise EngineStartError(f"{remote.url} does not say which checkpoint it serves (/v1/models root)")
        where = remote.root if Path(remote.root).is_dir() else hub.download(remote.root, None, self.settings,
                                                                            weights=False)
        local = ModelSpec(name=f"{spec.name}-reference", label=f"{remote.root} (reference)",
                          family=families.GENERIC.name, path=where, engine_args=EngineArgs(
                              max_model_len=remote.max_model_len or None, load_format="dummy",
                              limit_mm_per_prompt=dict(spec.engine_args.limit_mm_per_prompt),
                              trust_remote_code=spec.engine_args.trust_remote_code))
        return self.start_renderer(local)

    def start_renderer(self, spec: ModelSpec) -> Renderer:
        """vLLM's renderer for ``spec`` without an engine: rendering and expansion only (no process,
        no weights; for work that needs nothing else, such as ``inspect`` on the command line)."""
        from vllm.renderers import renderer_from_config

        adapter, config = self._config(spec, weights=False)
        renderer = renderer_from_config(config)
        apply_workarounds(renderer, config.model_config)
        return Renderer(spec, renderer, config.model_config, adapter)

    async def renderer(self, spec: ModelSpec) -> Renderer | RemoteEngine:
        """Something that renders ``spec``: its running engine, else a renderer without an engine (an
        endpoint entry: its remote engine)."""
        engine = self._engines.get(spec.name)
        if spec.remote or (engine is not None and not engine.dead):
            return await self.get(spec)
        renderer = self._renderers.get(spec.name)
        if renderer is None or renderer.spec != spec:  # built once (seconds: vLLM's config, tokenizer, processor)
            renderer = await asyncio.to_thread(self.start_renderer, spec)
            self._renderers[spec.name] = renderer
        self._renderers.move_to_end(spec.name)
        while len(self._renderers) > RENDERERS_KEPT:
            self._renderers.popitem(last=False)
        return renderer

    def _start(self, spec: ModelSpec) -> Engine:
        from vllm.v1.engine.async_llm import AsyncLLM

        need = int(self.settings.cpu_kv_cache_gib * 2**30) if not has_gpu() else 0
        free = psutil.virtual_memory().available
        if need > free:  # vLLM would find out inside its engine process, with the reason only in its log
            raise EngineStartError(
                f"not enough memory to start {spec.name}: its KV cache needs {need / 2**30:.1f} GiB, "
                f"{free / 2**30:.1f} GiB is free (lower VLLM_DEMO_CPU_KV_CACHE_GIB or stop other programs)")
        log_file = engine_log_file(self.settings)  # before the config, which takes vLLM's logging setup
        adapter, config = self._config(spec, functools.partial(self._phase, spec.name))
        self._phase(spec.name, "starting vLLM's engine processes (weights, memory profiling)")
        before = descendants()
        log_start = log_file.stat().st_size if log_file.exists() else 0
        t0 = time.perf_counter()
        try:
            with environment(cpu_preload()):  # the engine core process starts in here
                llm = AsyncLLM.from_vllm_config(config)
        except Exception as exc:  # vLLM raises many kinds; the user needs the cause in one line
            for proc in processes(frozenset(descendants() - before)):
                proc.kill()
            # The engine process's own error is only in its log ("See root cause above"): name it.
            cause = logged_error(log_file, log_start) or _root_cause(exc)
            raise EngineStartError(f"could not start {spec.name} ({config.model_config.model}): {cause}") from exc
        applied = apply_workarounds(llm, llm.model_config)
        log.info("started %s in %.1f s%s", spec.name, time.perf_counter() - t0,
                 f" (vLLM workarounds: {', '.join(applied)})" if applied else "")
        pids = frozenset(descendants() - before)
        engine = Engine(spec, llm, adapter, pids, shared_memory(pids))
        try:
            engine.reasoning_parser_class  # noqa: B018 - a parser the tokenizer cannot serve fails the start
        except EngineStartError as exc:
            engine.shutdown()
            raise EngineStartError(f"could not start {spec.name}: {exc}") from None
        # This frame outlives the call: a module first imported above (vLLM's audio media, on a failed
        # optional import) keeps its traceback, whose frames reach back to here. Unbound, ``llm`` goes with
        # its engine's shutdown; bound, vLLM 0.32's AsyncLLM.__del__ would run at interpreter exit and
        # print a TypeError traceback.
        del llm
        return engine

    def engine_kwargs(self, spec: ModelSpec, model_dir: str | None = None) -> dict[str, Any]:
        """``AsyncEngineArgs`` keyword arguments for ``spec`` (the model path aside): ``serve_kwargs`` and what
        this machine needs (on CPU: the KV cache's size, whole prompts). ``model_dir``: the checkpoint's
        directory, where the entry leaves its family to it (``family: auto``)."""
        kwargs = serve_kwargs(profile(spec, model_dir))
        if not has_gpu():
            kwargs["kv_cache_memory_bytes"] = int(self.settings.cpu_kv_cache_gib * 2**30)
            # vLLM 0.32 on CPU: a seeded request whose prompt is split over engine steps (chunked
            # prefill) crashes the engine core ("CPU Generator does not use offset"). Whole prompts
            # avoid it; a model entry may still turn chunking on explicitly.
            if spec.engine_args.enable_chunked_prefill is None:
                kwargs["enable_chunked_prefill"] = False
        return kwargs

    def model_path(self, spec: ModelSpec, report: Any = None, weights: bool = True) -> str:
        """What vLLM loads for ``spec``: a freshly built tiny model, a local directory, or a hub
        checkpoint downloaded first with huggingface_hub (``weights=False``: all but its weights, a renderer's
        need); ``report(phase, bytes_done=, bytes_total=)`` hears where that stands (the page's progress)."""
        report = report or (lambda phase, **fields: None)
        if spec.tiny:
            report("building the tiny model's files")
            return str(tiny_model_dir(spec.family, self.settings.cache_dir / "tiny-models"))
        if spec.repo is None:
            if not (Path(spec.path or "") / "config.json").is_file():
                raise EngineStartError(f"could not start {spec.name}: {spec.path} is not a model directory "
                                       "(no config.json there)")
            return spec.path or ""
        from .. import hub

        report(f"downloading {spec.repo}")
        return hub.download(spec.repo, spec.engine_args.revision, self.settings,
                            on_bytes=lambda done, total: report(f"downloading {spec.repo}", bytes_done=done,
                                                                bytes_total=total), weights=weights)


def serve_kwargs(found: Profile) -> dict[str, Any]:
    """The engine arguments a model starts with on any machine, as ``AsyncEngineArgs`` keyword arguments (the
    model path aside): the entry's, the processor kwargs that size the encoder cache, prefix caching said
    explicitly, and what vLLM 0.32 needs of the architecture (``start_kwargs``). The in-process engine and the
    exported ``vllm serve`` command both come from here, so they render the same prompts."""
    kwargs: dict[str, Any] = dict(found.spec.engine_args.to_vllm())
    kwargs["mm_processor_kwargs"] = found.startup_mm_kwargs() or None
    kwargs.update(prefix_caching_kwargs(found.adapter))
    return start_kwargs(kwargs, found.adapter)


def hybrid_on_cpu(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A hybrid (Mamba, linear-attention or convolution layers) language model on CPU: vLLM 0.32 refuses one
    with prefix caching and without chunked prefill ("Chunked prefill is required for mamba cache mode
    'align'"), and this machine turns chunked prefill off (a seeded request whose prompt is split over engine
    steps crashes the CPU engine core: "CPU Generator does not use offset"; the 'align' mode splits prompts at
    its block boundaries even when a step could take them whole). Prefix caching goes off instead: whole
    prompts, seeds that work, and each turn's prompt computed again."""
    return {**kwargs, "enable_prefix_caching": False}


def prefix_caching_kwargs(adapter: Adapter) -> dict[str, Any]:
    """``enable_prefix_caching=True`` for a model of a family the app knows, said explicitly so the
    in-process engine and the exported ``vllm serve`` command agree. These are all decoder-only models,
    which vLLM 0.32 prefix-caches on CPU and GPU alike (``ModelConfig.is_prefix_caching_supported``; image
    hashes are part of the block hashes, so images are reused too). ``{}`` for the generic adapter: vLLM
    decides from the checkpoint (on for decoder-only models, off for encoder-decoder ones)."""
    return {} if adapter is families.GENERIC else {"enable_prefix_caching": True}


def resolve_adapter(spec: ModelSpec, model_dir: str) -> Adapter:
    """The entry's family adapter (its profile's, read again from ``model_dir``, the directory the engine
    starts from); a ``family: auto`` entry whose directory has no readable config.json cannot start."""
    found = profile(spec, model_dir)
    if spec.family == AUTO and found.model_type is None:
        raise EngineStartError(f"could not start {spec.name}: {model_dir} has no readable config.json with a "
                               "model_type")
    return found.adapter


def _root_cause(exc: BaseException, limit: int = 300) -> str:
    """The innermost cause of ``exc`` on one line, at most ``limit`` characters."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip() and "errors.pydantic" not in line)
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
