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
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal

import psutil

from ..families import FAMILIES
from ..errors import EngineBusyError, EngineDiedError, EngineStartError, InputError
from ..registry import ModelSpec, Sampling
from ..settings import Settings
from ..tiny_models import tiny_model_dir
from .geometry import image_geometry
from .remote import RemoteEngine
from .runs import token_runs
from .types import ImageRange, RenderedPrompt, TokenDelta

log = logging.getLogger(__name__)

# The app runs offline-capable engines: no usage reports leave the machine.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

EngineState = Literal["not loaded", "loading", "ready"]


def has_gpu() -> bool:
    """True when vLLM runs on a GPU here (False on the CPU build)."""
    from vllm.platforms import current_platform

    return not current_platform.is_cpu()


class Engine:
    """One running vLLM engine for one model."""

    def __init__(self, spec: ModelSpec, llm: Any, child_pids: frozenset[int]):
        self.spec = spec
        self._llm = llm
        self.child_pids = child_pids
        """Processes this engine started (its engine core); all end at shutdown."""
        self.max_model_len: int = llm.model_config.max_model_len

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (for decoding ids in views)."""
        return self._llm.renderer.tokenizer

    def token_runs(self, ids: Sequence[int]) -> tuple[tuple[str, int], ...]:
        """The ids as runs: (special token, repeat count), and the decoded text between them."""
        return token_runs(ids, self._special_names, self.tokenizer.decode)

    @functools.cached_property
    def _special_names(self) -> dict[int, str]:
        ids = self.tokenizer.convert_tokens_to_ids(list(self.special_tokens))
        return {i: self.tokenizer.convert_ids_to_tokens(i) for i in ids if i is not None}

    @functools.cached_property
    def special_tokens(self) -> tuple[str, ...]:
        """Strings the tokenizer turns into special tokens (placeholders, chat markers, ...)."""
        added = getattr(self.tokenizer, "get_added_vocab", lambda: {})()
        return tuple(sorted(set(added) | set(self.tokenizer.all_special_tokens)))

    @property
    def dead(self) -> bool:
        """True once the engine core has died."""
        return self._llm is None or bool(self._llm.errored)

    def running_requests(self) -> int:
        """Requests the engine holds right now (0 when idle)."""
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    async def render(self, messages: Sequence[dict[str, Any]], mm_kwargs: dict[str, Any]) -> RenderedPrompt:
        """Apply the chat template and run the image processor, as ``vllm serve`` does.

        These are the steps of vLLM's ``render_chat_async``, called one by one so the template's
        text output (before placeholder expansion) can be shown too; the per-request processor
        kwargs travel with the prompt, as the OpenAI server passes them.
        """
        from vllm.exceptions import VLLMValidationError
        from vllm.renderers.hf import resolve_chat_template_content_format

        renderer = self._llm.renderer
        kwargs = dict(mm_kwargs)
        messages = [_with_torch_embeds(m) for m in messages]
        try:
            conversation, dict_prompt = await renderer.render_messages_async(messages, chat_params(kwargs))
            _unwrap_plain_embeds(dict_prompt)
            prompt_text = dict_prompt.get("prompt", "")
            # No length limit here: the service refuses an over-long prompt with its exact expanded count.
            tok_params = dataclasses.replace(renderer.default_chat_tok_params, max_total_tokens=None)
            (tok_prompt,) = await renderer.tokenize_prompts_async([dict_prompt], tok_params)
            if kwargs:  # what render_chat_async's prompt_extras does with the server's mm_processor_kwargs
                tok_prompt["mm_processor_kwargs"] = kwargs
            # skip_mm_cache: processed images still come from the processor cache, but are not marked
            # as "already sent" to the engine core. A render that is never generated from (inspect
            # only, a prompt over max_model_len, Stop right after rendering) would otherwise leave
            # the two caches out of step, and a later request with the same image would fail.
            engine_input = await renderer.process_for_engine_async(tok_prompt, time.time(), skip_mm_cache=True)
        except (VLLMValidationError, ValueError) as exc:
            raise InputError(f"{self.spec.name}: {exc}") from None
        content_format = resolve_chat_template_content_format(
            chat_template=None, tools=None, given_format="auto",
            tokenizer=renderer.tokenizer, model_config=self._llm.model_config,
        )
        placeholders = engine_input.get("mm_placeholders", {}).get("image", [])
        family = FAMILIES[self.spec.family]
        images = [part.get("image_pil") for m in messages if isinstance(m.get("content"), list)
                  for part in m["content"] if part.get("type") in ("image_pil", "image_embeds")]
        items = engine_input.get("mm_kwargs", {}).get("image", [])
        return RenderedPrompt(
            model=self.spec.name,
            content_format=content_format,
            conversation=tuple(conversation),
            prompt=prompt_text,
            prompt_token_ids=tuple(engine_input["prompt_token_ids"]),
            image_ranges=tuple(ImageRange(p.offset, p.length) for p in placeholders),
            images=tuple(image_geometry(self.spec.family, item, image, self._llm.model_config.hf_config, kwargs)
                         for item, image in zip(items, images, strict=True)),
            image_token_id=self.tokenizer.convert_tokens_to_ids(family.image_token),
            placeholder=family.placeholder,
            mm_kwargs=kwargs,
            max_model_len=self.max_model_len,
            engine_input=engine_input,
        )

    async def stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
        """Generate from ``rendered``; closing the iterator early aborts the vLLM request."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine.exceptions import EngineDeadError

        params = SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
            seed=sampling.seed, ignore_eos=sampling.ignore_eos,
            output_kind=RequestOutputKind.DELTA,
        )
        request_id = f"vlm-demo-{uuid.uuid4().hex}"
        finished = False
        try:
            async with contextlib.aclosing(self._llm.generate(rendered.engine_input, params, request_id)) as outs:
                first = True
                async for out in outs:
                    completion = out.outputs[0]
                    finished = out.finished
                    prompt_ids = tuple(out.prompt_token_ids) if first and out.prompt_token_ids else None
                    first = False
                    yield TokenDelta(completion.text, len(completion.token_ids), completion.finish_reason, prompt_ids)
        except EngineDeadError as exc:
            raise EngineDiedError(
                f"the {self.spec.name} engine stopped ({exc}); the next request restarts it") from None
        finally:
            if not finished and not self.dead:
                await self._llm.abort(request_id)

    def shutdown(self) -> None:
        """Stop the engine and wait until its processes have ended."""
        if self._llm is None:
            return
        self._llm.shutdown()
        self._llm = None  # collected now, not at interpreter exit (where vLLM's __del__ fails)
        _, alive = psutil.wait_procs([p for p in _procs(self.child_pids)], timeout=30)
        for proc in alive:
            proc.kill()


def _with_torch_embeds(message: dict[str, Any]) -> dict[str, Any]:
    """The message with image-embedding arrays (numpy, from media intake) as torch tensors."""
    content = message.get("content")
    if not isinstance(content, list) or not any(p.get("type") == "image_embeds" for p in content):
        return message
    import torch

    parts = [{**p, "image_embeds": {k: torch.from_numpy(v) for k, v in p["image_embeds"].items()}}
             if p.get("type") == "image_embeds" else p for p in content]
    return {**message, "content": parts}


def _unwrap_plain_embeds(prompt: dict[str, Any]) -> None:
    """Embeddings that are one tensor (LLaVA) go to the engine as that tensor, as vLLM's server
    passes a tensor-only ``image_embeds``; the chat parser takes tensors only inside a dict."""
    data = prompt.get("multi_modal_data", {}).get("image")
    if isinstance(data, dict) and set(data) == {"image_embeds"}:
        prompt["multi_modal_data"]["image"] = data["image_embeds"]


def chat_params(mm_kwargs: dict[str, Any]) -> Any:
    """The ``ChatParams`` vLLM's OpenAI server builds for a plain chat request with these kwargs."""
    from vllm.renderers import ChatParams

    return ChatParams(
        chat_template_kwargs={"add_generation_prompt": True, "continue_final_message": False, "tokenize": False},
        mm_processor_kwargs=dict(mm_kwargs) or None,
    )


def _procs(pids: frozenset[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


def _descendants() -> set[int]:
    """Our child processes, less Python's multiprocessing resource tracker (it outlives engines)."""
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "multiprocessing.resource_tracker" not in " ".join(proc.cmdline()):
                pids.add(proc.pid)
    return pids


class EngineManager:
    """Starts, shares and stops engines: at most ``settings.max_engines`` alive at once. Endpoint
    entries get a ``RemoteEngine`` (no process, outside that count and the switch policy)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._remote: dict[str, RemoteEngine] = {}
        self._loading: set[str] = set()
        self._lock = asyncio.Lock()
        self.starts = 0
        """How many engines this manager has started (tests check singletons with it)."""

    def state(self, name: str) -> EngineState | str:
        """Whether the model's engine is not loaded, loading or ready ("remote: URL" for an endpoint)."""
        if name in self._remote:
            return f"remote: {self._remote[name].url}"
        if name in self._loading:
            return "loading"
        return "ready" if name in self._engines else "not loaded"

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
        async with self._lock:
            engine = self._engines.get(spec.name)
            if engine is not None and engine.dead:
                await asyncio.to_thread(engine.shutdown)
                del self._engines[spec.name]
                engine = None
            if engine is None:
                while len(self._engines) >= self.settings.max_engines:
                    old_name, old = next(iter(self._engines.items()))
                    await self._wait_idle(old, spec.name)
                    del self._engines[old_name]
                    await asyncio.to_thread(old.shutdown)
                self._loading.add(spec.name)
                try:
                    engine = await asyncio.to_thread(self._start, spec)
                finally:
                    self._loading.discard(spec.name)
                self._engines[spec.name] = engine
                self.starts += 1
            self._engines.move_to_end(spec.name)
            return engine

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

    def shutdown_all(self) -> None:
        """Stop every engine (at exit)."""
        while self._engines:
            _, engine = self._engines.popitem()
            engine.shutdown()
        while self._remote:
            self._remote.popitem()[1].shutdown()

    def _start(self, spec: ModelSpec) -> Engine:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        model = self.model_path(spec)
        kwargs = self.engine_kwargs(spec)
        if spec.repo:  # a downloaded snapshot directory: keep the hub name in logs and the API
            kwargs["served_model_name"] = spec.repo
        need = kwargs.get("kv_cache_memory_bytes") or 0
        free = psutil.virtual_memory().available
        if need > free:  # vLLM would find out inside its engine process, with the reason only in its log
            raise EngineStartError(
                f"not enough memory to start {spec.name}: its KV cache needs {need / 2**30:.1f} GiB, "
                f"{free / 2**30:.1f} GiB is free (lower VLLM_DEMO_CPU_KV_CACHE_GIB or stop other programs)")
        before = _descendants()
        t0 = time.perf_counter()
        try:
            llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **kwargs))
        except Exception as exc:  # vLLM raises many kinds; the user needs the cause in one line
            for proc in _procs(frozenset(_descendants() - before)):
                proc.kill()
            raise EngineStartError(f"could not start {spec.name} ({model}): {_root_cause(exc)}") from exc
        log.info("started %s in %.1f s", spec.name, time.perf_counter() - t0)
        return Engine(spec, llm, frozenset(_descendants() - before))

    def engine_kwargs(self, spec: ModelSpec) -> dict[str, Any]:
        """``AsyncEngineArgs`` keyword arguments for ``spec`` (the model path aside); a ``vllm serve``
        started with the same values renders the same prompts."""
        kwargs: dict[str, Any] = dict(spec.engine_args.to_vllm())
        kwargs["mm_processor_kwargs"] = spec.startup_mm_kwargs() or None
        if not has_gpu():
            kwargs["kv_cache_memory_bytes"] = int(self.settings.cpu_kv_cache_gib * 2**30)
            # vLLM 0.32 on CPU: a seeded request whose prompt is split over engine steps (chunked
            # prefill) crashes the engine core ("CPU Generator does not use offset"). Whole prompts
            # avoid it; a model entry may still turn chunking on explicitly.
            if spec.engine_args.enable_chunked_prefill is None:
                kwargs["enable_chunked_prefill"] = False
        return kwargs

    def model_path(self, spec: ModelSpec) -> str:
        """What vLLM loads for ``spec``: a freshly built tiny model, a local directory, or a hub
        checkpoint downloaded first with huggingface_hub (its tqdm bars are the UI's progress)."""
        if spec.tiny:
            return str(tiny_model_dir(spec.family, self.settings.cache_dir / "tiny-models"))
        if spec.repo is None:
            if not (Path(spec.path or "") / "config.json").is_file():
                raise EngineStartError(f"could not start {spec.name}: {spec.path} is not a model directory "
                                       "(no config.json there)")
            return spec.path or ""
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(spec.repo, revision=spec.engine_args.revision)
        except Exception as exc:  # offline, gated, not found, disk full: say which
            raise EngineStartError(f"could not download {spec.repo}: {_root_cause(exc)}") from exc


def _root_cause(exc: BaseException, limit: int = 300) -> str:
    """The innermost cause of ``exc`` on one line, at most ``limit`` characters."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip() and "errors.pydantic" not in line)
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
