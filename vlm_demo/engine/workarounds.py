"""Workarounds for vLLM 0.32 multimodal-processing bugs, applied to one engine at a time.

Nothing here patches vLLM's classes or modules: ``adjust_engine_kwargs`` rewrites the arguments of
one engine before it starts, and ``apply_workarounds`` replaces a method on that engine's own
renderer processor objects (instance attributes). Other engines in the process are untouched.
Each workaround applies only to the vLLM release it was written and checked for (``RELEASE``);
on any other release nothing is changed, so an upgrade shows at once whether a bug is still there.

Usage (engine layer)::

    kwargs = start_kwargs(engine_kwargs, adapter)          # before the engine starts
    llm = AsyncLLM.from_vllm_config(...)
    applied = apply_workarounds(llm, llm.model_config)     # once, right after
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

#: The vLLM release these workarounds are for (a ``vllm.__version__`` prefix).
RELEASE = "0.32."

#: InternVL config fields that vLLM 0.32's image processor reads as defaults from config.json
#: (``InternVLProcessingInfo.get_image_processor``), so giving them as config overrides is the same
#: as giving them as start-up ``mm_processor_kwargs``.
_INTERNVL_CONFIG_KWARGS = ("min_dynamic_patch", "max_dynamic_patch", "dynamic_image_size", "use_thumbnail")


def _is_release() -> bool:
    import vllm

    return vllm.__version__.startswith(RELEASE)


def start_kwargs(engine_kwargs: Mapping[str, Any], adapter: Any) -> dict[str, Any]:
    """The engine arguments of a model of this family adapter, with the start-up workarounds applied
    (the same arguments serve the in-process engine, the exported ``vllm serve`` command and the tests'
    servers)."""
    for model_type in adapter.model_types:
        engine_kwargs, _ = adjust_engine_kwargs(model_type, engine_kwargs)
    return dict(engine_kwargs)


def adjust_engine_kwargs(model_type: str, engine_kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Engine arguments with the start-up part of the InternVL video-processor workaround.

    InternVL video processor kwargs (vLLM 0.32, ``vllm/model_executor/models/internvl.py``,
    ``InternVLProcessingInfo.get_video_processor``): when the tokenizer has ``<|video_pad|>`` (every
    Qwen2/Qwen3-based InternVL, e.g. ``OpenGVLab/InternVL2_5-1B-MPO``), ``get_hf_processor`` also
    builds ``InternVLVideoProcessor(image_size)`` from *all* merged ``mm_processor_kwargs``, so
    start-up ``mm_processor_kwargs={"max_dynamic_patch": 12}`` makes ``AsyncLLM`` fail while it
    sizes the encoder budget (``MultiModalBudget``, in the front-end ``InputProcessor`` and again in
    the engine core) with ``TypeError: InternVLVideoProcessor.__init__() got an unexpected keyword
    argument 'max_dynamic_patch'``. Those processes build their own processors, out of reach of
    ``apply_workarounds``; so the image-only start-up kwargs move to ``hf_overrides`` (the config
    values the image processor falls back to: same tiles, same token budget, no kwarg left for the
    video processor). Upstream: no issue or fix found (2026-12-03); recheck on each vLLM upgrade.
    """
    kwargs = dict(engine_kwargs)
    if model_type == "gemma4" and _is_release():
        return _gemma4_cpu_audio(kwargs)
    if model_type == "internvl" and _is_release():
        return _interns1_crop_sizing(kwargs)
    mm_kwargs = dict(kwargs.get("mm_processor_kwargs") or {})
    moved = {key: mm_kwargs.pop(key) for key in _INTERNVL_CONFIG_KWARGS if key in mm_kwargs}
    overrides = kwargs.get("hf_overrides") or {}
    if model_type != "internvl_chat" or not moved or not isinstance(overrides, dict) or not _is_release():
        return kwargs, []
    kwargs["mm_processor_kwargs"] = mm_kwargs or None
    kwargs["hf_overrides"] = {**overrides, **moved}
    return kwargs, ["internvl-video-kwargs (start-up kwargs as hf_overrides)"]


def _gemma4_cpu_audio(kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Gemma 4 on CPU: start with ``ContiguousAudioTowerInputs`` as the worker extension (see there), unless the
    entry names one of its own. On a GPU nothing changes."""
    from .processes import has_gpu

    if has_gpu() or kwargs.get("worker_extension_cls"):
        return kwargs, []
    kwargs["worker_extension_cls"] = GEMMA4_CPU_EXTENSION
    return kwargs, ["gemma4-cpu-audio-contiguous (worker extension)"]


def _interns1_crop_sizing(kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """HF-format InternVL (``model_type: internvl``, e.g. ``OpenGVLab/InternVL3_5-1B-HF``): start with
    ``crop_to_patches=True``.

    vLLM 0.32, ``vllm/model_executor/models/interns1.py``: the largest image the encoder cache is sized
    for (``resolve_target_ratios`` / ``get_num_image_tokens``) reads ``crop_to_patches`` from the
    checkpoint's config (false), while processing uses ``InternVLProcessor``'s default (true): the cache
    is sized for 256 tokens an image where a 640x480 image takes 3328, and requests fail with "exceeds
    the pre-allocated encoder cache size" (hidden while video keeps the cache larger). Starting with the
    processor's own value sizes it right and changes no prompt. Upstream: no issue or fix found
    (2026-12-03).
    """
    mm_kwargs = dict(kwargs.get("mm_processor_kwargs") or {})
    if "crop_to_patches" in mm_kwargs:
        return kwargs, []
    kwargs["mm_processor_kwargs"] = {**mm_kwargs, "crop_to_patches": True}
    return kwargs, ["interns1-crop-sizing (crop_to_patches at start-up)"]


def apply_workarounds(renderer_or_llm: Any, model_config: Any) -> list[str]:
    """Apply the per-request workarounds to this engine's (or renderer's) multimodal processor.

    ``renderer_or_llm`` is an ``AsyncLLM`` (its ``.renderer`` is used) or a vLLM renderer;
    ``model_config`` is its ``ModelConfig``. Returns the names of the workarounds applied.
    """
    renderer = getattr(renderer_or_llm, "renderer", renderer_or_llm)
    processor = getattr(renderer, "mm_processor", None)
    if processor is None or not _is_release():
        return []
    model_type = model_config.hf_config.model_type
    applied = []
    if model_type == "internvl_chat" and getattr(processor.info, "ctx_video_token", None):
        _filter_internvl_video_kwargs(processor.info)
        applied.append("internvl-video-kwargs")
    if model_type == "ovis":
        _ovis_indicator_tokens_per_image(processor)
        applied.append("ovis-ragged-indicator-tokens")
    if _resample_with_soxr(processor):
        applied.append("audio-resample-soxr")
    return applied


def _resample_with_soxr(processor: Any) -> bool:
    """Sound vLLM decodes itself (a video's own sound, ``use_audio_in_video``) resampled with soxr, not torchaudio.

    vLLM 0.32's ``MultiModalDataParser`` resamples audio not at the model's rate with torchaudio unless a model's
    parser names another method (``AudioResampler(method="torchaudio")``); torchaudio cannot be installed beside this
    torch, so a video whose sound is at 44.1 or 48 kHz fails with ``PackageNotFoundError: ... vllm`` (vLLM's
    "install vllm[audio]" hint). The app's own clips come at the model's rate already; soxr (installed: the app's
    resampler, HQ as here) is one of vLLM's own methods. Sets the method on this engine's parser only, where it is
    torchaudio and torchaudio is missing (the processor's and its info's: vLLM parses with the latter). Release: 0.32.0. Upstream: the default is torchaudio on main too (2026-12-07).
    """
    import importlib.util

    if importlib.util.find_spec("torchaudio") is not None:
        return False
    parsers = (getattr(processor, "data_parser", None), getattr(processor.info, "data_parser", None))
    resamplers = [r for p in parsers if (r := getattr(p, "audio_resampler", None)) and r.method == "torchaudio"]
    for resampler in resamplers:
        resampler.method = "soxr"
    return bool(resamplers)


def _filter_internvl_video_kwargs(info: Any) -> None:
    """InternVL: give the video processor only the kwargs its constructor takes.

    vLLM 0.32, ``vllm/model_executor/models/internvl.py``, ``InternVLProcessingInfo.get_video_processor``
    passes every merged mm kwarg to ``InternVLVideoProcessor(image_size)``
    (``vllm/transformers_utils/processors/internvl.py``), so any request with ``min_dynamic_patch`` /
    ``max_dynamic_patch`` (image kwargs; video frames always use one tile) fails with ``TypeError``
    whenever the tokenizer has the video token. This replaces ``get_video_processor`` on this
    engine's processing-info instance with the same steps plus the filter; the image path, and so
    the prompt ids, are unchanged. Release: 0.32.0. Upstream: no issue or fix found (2026-12-03).
    """
    from vllm.transformers_utils.processors.internvl import InternVLVideoProcessor

    accepted = set(inspect.signature(InternVLVideoProcessor).parameters)

    def get_video_processor(**kwargs: object) -> InternVLVideoProcessor:
        merged = info.ctx.get_merged_mm_kwargs(kwargs)
        merged.setdefault("image_size", info.get_hf_config().vision_config.image_size)
        return InternVLVideoProcessor(**{k: v for k, v in merged.items() if k in accepted})

    info.get_video_processor = get_video_processor


def _ovis_indicator_tokens_per_image(processor: Any) -> None:
    """Ovis2: build each image's indicator tokens on its own, not as one rectangular tensor.

    vLLM 0.32, ``vllm/model_executor/models/ovis.py``, ``OvisMultiModalProcessor._postprocess_hf_mm_data``
    ends with ``torch.tensor(indicator_tokens)`` over a list with one row per image, whose length
    depends on the image's partition grid (3 for a 1x1 grid, 6 for 2x2, ...). Two images with
    different grids processed in one call (any two new images when the processor cache misses, e.g.
    640x480 and 320x320) fail with ``ValueError: expected sequence of length 6 at dim 1 (got 3)``.
    This runs vLLM's own method once per image and keeps the rows as a list of 1-D tensors (the
    ``indicator_tokens`` field is batched per image, and the model concatenates them), so each
    image gets exactly what it gets when processed alone. Release: 0.32.0. Upstream: no issue or
    fix found (2026-12-03); older vLLM Ovis code kept the rows as a plain list.
    """
    from transformers import BatchFeature

    original = processor._postprocess_hf_mm_data

    def _postprocess_hf_mm_data(mm_data: Mapping[str, object], hf_processor_mm_kwargs: Mapping[str, object],
                                processed_data: BatchFeature) -> BatchFeature:
        if not mm_data:
            return original(mm_data, hf_processor_mm_kwargs, processed_data)
        processed_data["indicator_tokens"] = [
            original(mm_data, hf_processor_mm_kwargs, BatchFeature({"grids": [grid]}))["indicator_tokens"][0]
            for grid in processed_data["grids"]
        ]
        return processed_data

    processor._postprocess_hf_mm_data = _postprocess_hf_mm_data


GEMMA4_CPU_EXTENSION = "vlm_demo.engine.workarounds.ContiguousAudioTowerInputs"
"""The worker extension (``AsyncEngineArgs.worker_extension_cls``) a Gemma 4 engine on CPU starts with."""


class ContiguousAudioTowerInputs:
    """Gemma 4 on vLLM 0.32's CPU backend: the audio tower's linear layers take their input made contiguous.

    vLLM 0.32, ``vllm/model_executor/models/gemma4_mm.py``: the audio tower is transformers' ``Gemma4AudioModel``
    with its ``nn.Linear`` layers replaced by vLLM's (``recursive_replace_linear``). In each Conformer block's light
    convolution (transformers 5.19, ``modeling_gemma4.py``, ``Gemma4AudioLightConv1d.forward``) the depthwise
    convolution runs on ``hidden_states.transpose(1, 2)`` and its output is transposed back; the norm and the
    activation keep that non-contiguous layout, and ``linear_end`` hands it to vLLM's CPU GEMM
    (``dispatch_cpu_unquantized_gemm`` -> oneDNN ``onednn_mm``), which requires ``stride(-1) == 1``: the first clip
    kills the engine core with ``RuntimeError: Expected a.stride(-1) == 1``. The tower runs in the engine's worker
    process, out of reach of ``apply_workarounds``: this class goes there as the engine's own worker extension (an
    engine argument, ``adjust_engine_kwargs``), and ``apply_worker_workarounds`` calls its method once after the
    start: it wraps ``cpu_linear`` on each linear layer of that engine's audio tower (instance attributes; no class
    or module is patched; ``.contiguous()`` is free for an input that already is). Release: 0.32.0. Upstream: not
    found (2026-12-08); a GPU's GEMM takes strided inputs.
    """

    def vlm_demo_contiguous_audio_inputs(self) -> int:
        """Wrap this worker's audio-tower linear layers; returns how many were wrapped."""
        tower = getattr(self.model_runner.get_model(), "audio_tower", None)  # type: ignore[attr-defined]
        wrapped = 0
        for module in (tower.modules() if tower is not None else ()):
            linear = getattr(module, "cpu_linear", None)
            if linear is None or getattr(linear, "_vlm_demo_contiguous", False):
                continue

            def contiguous(x, weight, bias, _linear=linear):  # noqa: ANN001 - vLLM's cpu_linear signature
                return _linear(x.contiguous(), weight, bias)

            contiguous._vlm_demo_contiguous = True  # type: ignore[attr-defined]
            module.cpu_linear = contiguous
            wrapped += 1
        return wrapped


async def apply_worker_workarounds(llm: Any) -> list[str]:
    """The workarounds that run in the engine's worker processes, once, right after the start (an engine started
    with ``GEMMA4_CPU_EXTENSION``: its audio tower's linear layers)."""
    config = getattr(llm, "vllm_config", None)
    if config is None or config.parallel_config.worker_extension_cls != GEMMA4_CPU_EXTENSION:
        return []
    counts = await llm.collective_rpc("vlm_demo_contiguous_audio_inputs")
    return [f"gemma4-cpu-audio-contiguous ({counts[0]} linear layers)"] if counts and counts[0] else []
