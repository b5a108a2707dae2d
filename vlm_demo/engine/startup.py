"""Starting one engine: what vLLM loads (a tiny model built here, a directory, a Hub download), the arguments
it starts with (the same for the in-process engine and the exported ``vllm serve`` command), its vLLM config,
and the start itself, or a renderer without an engine core built from the same config.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from .. import families
from ..errors import EngineStartError
from ..families import Adapter
from ..profile import Profile, resolve
from ..registry import AUTO, ModelSpec
from ..settings import Settings
from ..tiny_models import tiny_model_dir
from . import forkserver
from .local import Engine
from .processes import (cpu_preload, descendants, engine_log_file, environment, has_gpu, logged_error, memory_gib,
                        processes, shared_memory)
from .renderer import Renderer
from .workarounds import apply_workarounds, start_kwargs

log = logging.getLogger(__name__)


def model_path(spec: ModelSpec, settings: Settings, report: Any = None, weights: bool = True) -> str:
    """What vLLM loads for ``spec``: a freshly built tiny model, a local directory, or a hub
    checkpoint downloaded first with huggingface_hub (``weights=False``: all but its weights, a renderer's
    need); ``report(phase, bytes_done=, bytes_total=)`` hears where that stands (the page's progress)."""
    report = report or (lambda phase, **fields: None)
    if spec.tiny:
        report("building the tiny model's files")
        return str(tiny_model_dir(spec.family, settings.cache_dir / "tiny-models"))
    if spec.repo is None:
        if not (Path(spec.path or "") / "config.json").is_file():
            raise EngineStartError(f"could not start {spec.name}: {spec.path} is not a model directory "
                                   "(no config.json there)")
        return spec.path or ""
    from .. import hub

    report(f"downloading {spec.repo}")
    return hub.download(spec.repo, spec.engine_args.revision, settings,
                        on_bytes=lambda done, total: report(f"downloading {spec.repo}", bytes_done=done,
                                                            bytes_total=total), weights=weights)


def engine_kwargs(spec: ModelSpec, settings: Settings, model_dir: str | None = None) -> dict[str, Any]:
    """``AsyncEngineArgs`` keyword arguments for ``spec`` (the model path aside): ``serve_kwargs`` and what
    this machine needs (on CPU: the KV cache's size, whole prompts). ``model_dir``: the checkpoint's
    directory, where the entry leaves its family to it (``family: auto``)."""
    kwargs = serve_kwargs(resolve(spec, model_dir))
    if not has_gpu():
        kwargs["kv_cache_memory_bytes"] = int(settings.cpu_kv_cache_gib * 2**30)
        # vLLM 0.32 on CPU: a seeded request whose prompt is split over engine steps (chunked
        # prefill) crashes the engine core ("CPU Generator does not use offset"). Whole prompts
        # avoid it; a model entry may still turn chunking on explicitly.
        if spec.engine_args.enable_chunked_prefill is None:
            kwargs["enable_chunked_prefill"] = False
    return kwargs


def serve_kwargs(found: Profile) -> dict[str, Any]:
    """The engine arguments a model starts with on any machine, as ``AsyncEngineArgs`` keyword arguments (the
    model path aside): the entry's, the processor kwargs that size the encoder cache, prefix caching said
    explicitly, and what vLLM 0.32 needs of the architecture (``start_kwargs``). The in-process engine and the
    exported ``vllm serve`` command both come from here, so they render the same prompts."""
    kwargs: dict[str, Any] = dict(found.spec.engine_args.to_vllm())
    kwargs["mm_processor_kwargs"] = found.startup_mm_kwargs() or None
    if found.spec.engine_args.enable_prefix_caching is None:  # an entry's own choice stands
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
    found = resolve(spec, model_dir)
    if spec.family == AUTO and found.model_type is None:
        raise EngineStartError(f"could not start {spec.name}: {model_dir} has no readable config.json with a "
                               "model_type")
    return found.adapter


_IMPORTING = threading.Lock()


def _import_vllm(engine: bool = False) -> None:
    """Import what an engine and a renderer are built with, one thread at a time. transformers' lazy top-level module
    is not safe to import from two threads at once: an engine's start and the panels' renderer, begun within a
    fraction of a second of each other in a process that had imported neither (the app just launched, a question
    while the start-up model's engine starts), failed one of them with "cannot import name 'AutoTokenizer' from
    'transformers'" (or 'PreTrainedConfig'). ``engine``: the engine's client too (0.8 s more, not a renderer's
    need). Once imported, this costs nothing."""
    with _IMPORTING:
        import transformers
        import vllm.engine.arg_utils
        import vllm.renderers  # noqa: F401

        if engine:
            import vllm.v1.engine.async_llm  # noqa: F401

        transformers.AutoConfig, transformers.AutoProcessor, transformers.AutoTokenizer  # noqa: B018 - lazy names


def vllm_config(spec: ModelSpec, settings: Settings, report: Any = None, weights: bool = True) -> tuple[Adapter, Any]:
    """The model's family adapter and vLLM config (what the engine and its renderer are built from);
    ``report(phase, **bytes)`` hears where it stands (an engine's start); ``weights=False``: a renderer's, for
    which a Hub checkpoint's weights are not fetched."""
    report = report or (lambda phase, **fields: None)
    _import_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs

    model = model_path(spec, settings, report, weights)
    report("reading the model's configuration")
    adapter = resolve_adapter(spec, model)
    kwargs = engine_kwargs(spec, settings, model)
    if spec.repo:  # a downloaded snapshot directory: keep the hub name in logs and the API
        kwargs["served_model_name"] = spec.repo
    try:
        if kwargs.get("enable_chunked_prefill") is False and spec.engine_args.enable_chunked_prefill is None:
            if AsyncEngineArgs(model=model, **kwargs).create_model_config().is_hybrid:
                kwargs = hybrid_on_cpu(kwargs)
        config = AsyncEngineArgs(model=model, **kwargs).create_engine_config()
    except Exception as exc:  # vLLM raises many kinds; the user needs the cause in one line
        raise EngineStartError(f"could not start {spec.name} ({model}): {root_cause(exc)}") from exc
    if not config.model_config.is_multimodal_model:
        archs = ", ".join(config.model_config.architectures or ["?"])
        raise EngineStartError(f"{spec.name}: {archs} is not a multimodal model in vLLM; this app needs a "
                               "model that takes images")
    return adapter, config


def start_renderer(spec: ModelSpec, settings: Settings) -> Renderer:
    """vLLM's renderer for ``spec`` without an engine: rendering and expansion only (no process,
    no weights; for work that needs nothing else, such as ``inspect`` on the command line)."""
    _import_vllm()
    from vllm.renderers import renderer_from_config

    adapter, config = vllm_config(spec, settings, weights=False)
    renderer = renderer_from_config(config)
    apply_workarounds(renderer, config.model_config)
    return Renderer(spec, renderer, config.model_config, adapter)


def start_engine(spec: ModelSpec, settings: Settings, report: Any = None) -> Engine:
    """Start ``spec``'s engine (its processes, weights, memory profiling; seconds to minutes) and check it can
    serve; ``report(phase, **bytes)`` hears where the start stands. A failed start kills what it started and
    names the cause in one line (the engine process's own error from its log where there is one)."""
    report = report or (lambda phase, **fields: None)
    _import_vllm(engine=True)
    from vllm.v1.engine.async_llm import AsyncLLM

    need = int(settings.cpu_kv_cache_gib * 2**30) if not has_gpu() else 0
    free = psutil.virtual_memory().available
    if need > free:  # vLLM would find out inside its engine process, with the reason only in its log
        raise EngineStartError(
            f"not enough memory to start {spec.name}: its KV cache needs {need / 2**30:.1f} GiB, "
            f"{free / 2**30:.1f} GiB is free (lower VLLM_DEMO_CPU_KV_CACHE_GIB or stop other programs)")
    log_file = engine_log_file(settings)  # before the config, which takes vLLM's logging setup
    adapter, config = vllm_config(spec, settings, report)
    report("starting vLLM's engine processes (weights, memory profiling)")
    forkserver.warm(settings)  # before the count of our processes: the forkserver is no engine's
    before = descendants()
    log_start = log_file.stat().st_size if log_file.exists() else 0
    t0 = time.perf_counter()
    try:
        with environment(cpu_preload()), forkserver.engine_processes(settings):  # the engine core starts in here
            llm = AsyncLLM.from_vllm_config(config)
    except Exception as exc:  # vLLM raises many kinds; the user needs the cause in one line
        for proc in processes(frozenset(descendants() - before)):
            proc.kill()
        # The engine process's own error is only in its log ("See root cause above"): name it.
        cause = logged_error(log_file, log_start) or root_cause(exc)
        raise EngineStartError(f"could not start {spec.name} ({config.model_config.model}): {cause}") from exc
    applied = apply_workarounds(llm, llm.model_config)
    log.info("started %s in %.1f s%s", spec.name, time.perf_counter() - t0,
             f" (vLLM workarounds: {', '.join(applied)})" if applied else "")
    pids = frozenset(descendants() - before)
    engine = Engine(spec, llm, adapter, pids, shared_memory(pids))
    if not has_gpu():
        engine.footprint_gib = memory_gib(pids)
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


def root_cause(exc: BaseException, limit: int = 300) -> str:
    """The innermost cause of ``exc`` on one line, at most ``limit`` characters."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip() and "errors.pydantic" not in line)
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
