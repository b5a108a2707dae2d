"""The in-process engine: one vLLM ``AsyncLLM`` for one model, and generation from what its renderer
rendered (``Engine.stream`` generates from the very input ``Engine.render`` gave: the path ``vllm serve`` takes).
Starting and sharing engines is ``manager.py``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psutil

from ..errors import EngineDiedError, InputError
from ..families import Adapter
from ..registry import ModelSpec, Sampling
from .processes import processes, unlink_shared_memory
from .reasoning import ReasoningSplit, reasoning_parser_class
from .renderer import Renderer, printable_only
from .runs import without_other_specials
from .types import RenderedPrompt, TokenDelta


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
        self.footprint_gib: float | None = None
        """The memory its processes took once it was up, in GiB (CPU; what it counts for in the manager's budget)."""
        self.retired = False
        self._streams = 0  # answers streaming from it, counted from their first step
        """Set once the manager has switched it out: it takes no new request, and one that waits ends (``retire``)."""

    @property
    def dead(self) -> bool:
        """True once the engine core has died."""
        return self._llm is None or bool(self._llm.errored)

    def retire(self) -> None:
        """Take no new request, and end every request still waiting for output with vLLM's ``EngineDeadError``
        (its stream then fails in one line): called in the event loop before the engine is shut down, so a
        request that got this engine as another model's start switched it out never waits forever."""
        from vllm.v1.engine.exceptions import EngineDeadError

        self.retired = True
        if self._llm is not None:
            self._llm.output_processor.propagate_error(EngineDeadError())

    def running_requests(self) -> int:
        """Requests the engine holds right now (0 when idle)."""
        return max(self._streams, 0 if self._llm is None else self._llm.get_num_unfinished_requests())

    @functools.cached_property
    def prefix_cache_block(self) -> int | None:
        """Tokens per KV-cache block when vLLM's prefix cache is on (cache hits come in whole blocks),
        else None."""
        cache = self._llm.vllm_config.cache_config
        return cache.block_size if cache.enable_prefix_caching else None

    async def start_workers(self) -> list[str]:
        """The workarounds that run in this engine's worker processes (``workarounds.apply_worker_workarounds``),
        once, on the event loop that serves its requests."""
        from .workarounds import apply_worker_workarounds

        return await apply_worker_workarounds(self._llm) if self._llm is not None else []

    async def stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
        """Generate from ``rendered``; closing the iterator early aborts the vLLM request. From its first step it
        counts in ``running_requests`` (a switch waits for it), or it fails in one line where the engine was already
        switched out (``retire``): a question that got this engine as another model was picked never waits on a
        stopped engine."""
        if self.retired:
            raise EngineDiedError(self._retired_text())
        self._streams += 1
        try:
            async with contextlib.aclosing(self._stream(rendered, sampling)) as deltas:
                async for delta in deltas:
                    yield delta
        finally:
            self._streams -= 1

    async def _stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
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
            extra_args=dict(sampling.extra_args) if sampling.extra_args else None,
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
                        text = without_other_specials(completion.text, self.special_tokens, self.kept_tags)
                        reasoning, reasoning_tokens = "", 0
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
                raise EngineDiedError(self._retired_text() if self.retired else f"the {self.spec.name} engine stopped "
                                      f"({exc}); the next request restarts it") from None
            finally:
                if not finished and not self.dead:
                    await self._llm.abort(request_id)
                if not reached:  # it may not have reached the core: the items go again with their data next time
                    self._forget(hashes)
            if reached:
                return

    def _retired_text(self) -> str:
        return f"the {self.spec.name} engine was stopped for another model chosen meanwhile; ask again to restart it"

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
