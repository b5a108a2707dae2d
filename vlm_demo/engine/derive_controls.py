"""Controls derived from a model's own processor, for a model whose entry offers none.

transformers 5 processors declare the kwargs a request may set (``valid_kwargs``, which vLLM 0.32 lists per
scope with ``get_supported_mm_processor_kwargs``); the processor object holds the checkpoint's values. Each
image kwarg that is a whole number, a true/false or a dict of whole numbers (``size`` -> one control per key,
``size.longest_edge``) is a candidate; what would break the model or cannot change tokens is left out by name
(``NOT_CONTROLS``), and each candidate is then checked by rendering: a probe picture is rendered at the
checkpoint's value and at the ends of the candidate's range, and the candidate stays only where every render
works and one of them gives other ids (a number that changes nothing alone is tried again with each kept checkbox
turned: Gemma 3's crop counts count only with pan-and-scan on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from PIL import Image

from ..registry import ControlSetting, image_scoped, processor_kwargs

log = logging.getLogger(__name__)

NOT_CONTROLS = frozenset({
    # architecture constants: another value breaks the vision encoder
    "patch_size", "temporal_patch_size", "merge_size", "spatial_merge_size", "image_seq_length",
    "encoder_patch_size", "downsample_factor",  # LFM2-VL's patch size and its projector's pixel-unshuffle factor
    # pixel values only (normalisation, format): the same tokens
    "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std", "do_convert_rgb", "resample",
    "return_tensors", "data_format", "input_data_format", "device", "disable_grouping", "return_metadata",
    # fixed-size encoders' geometry: another value gives a picture the encoder was not built for
    "do_resize", "do_center_crop", "crop_size", "do_pad", "pad_size", "default_to_square",
    # video sampling: the page's own frame controls (vLLM's loader samples, media_io_kwargs)
    "do_sample_frames", "fps", "num_frames", "max_frames", "min_frames", "video_metadata",
})
"""Processor kwargs that are never offered as controls."""

RANGE = (4, 2)
"""A derived slider goes from the checkpoint's value divided by the first to the value times the second."""
PIXEL_COUNT = (100_000, 64)
"""A value above the first is a pixel count (Qwen's 12845056-pixel ``size.longest_edge``): its slider starts at
the value divided by the second, where it binds a 1280x720 picture."""
SLIDER_STEPS = 1000
"""A wide slider moves in about this many steps."""


PIXEL_ALIASES = {"min_pixels": "size.shortest_edge", "max_pixels": "size.longest_edge"}
"""The names a Qwen-style processor's docs give its pixel bounds, for the ``size`` edges the derived controls send:
vLLM 0.32 counts with either (``Qwen2VLProcessingInfo._complete_mm_processor_size_aliases``, PaddleOCR-VL's
``get_num_image_tokens``) and transformers 5.19's processors take them as deprecated aliases of the edges. A name is
offered where the processor declares it and renders the edge's ids at both ends of the edge's slider."""


@dataclass(frozen=True)
class Derived:
    """A model's derived controls, with the checkpoint's values they start at."""

    controls: tuple[ControlSetting, ...]
    """The controls, in name order."""
    values: Mapping[str, int | bool]
    """The checkpoint's value of each control (its processor's)."""
    dicts: Mapping[str, Mapping[str, int]]
    """The checkpoint's dict kwargs (``size``): a control of one key sends the whole dict, the others at the
    checkpoint's values (Qwen's image processor needs both of ``size``'s edges)."""
    scoped: frozenset[str] = frozenset()
    """Controls sent as the image processor's alone (``images_kwargs``), where the model takes them so."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Names the checkpoint's docs use for a control (``max_pixels`` -> ``size.longest_edge``), checked by rendering
    (``PIXEL_ALIASES``)."""


def candidates(image_processor: Any, names: set[str],
               defaults: Mapping[str, Any] | None = None) -> dict[str, int | bool]:
    """The kwargs of ``names`` that may become controls, with the checkpoint's values (dicts flattened); one the
    checkpoint leaves unset has the processor's own default (``defaults``: Gemma 3's crop counts), else, a
    true/false, off, as the processor takes it."""
    found: dict[str, int | bool] = {}
    declared = _declared(image_processor)
    for name in sorted(names - NOT_CONTROLS):
        value = getattr(image_processor, name, None)
        if value is None:
            value = (defaults or {}).get(name)
        if value is None and declared.get(name) is bool:
            value = False
        if isinstance(value, Mapping) or hasattr(value, "__dataclass_fields__"):  # size: dict or SizeDict
            items = dict(value) if isinstance(value, Mapping) else {k: getattr(value, k) for k in
                                                                     value.__dataclass_fields__}
            found.update({f"{name}.{k}": v for k, v in items.items()
                          if isinstance(v, int) and not isinstance(v, bool) and v > 0})
        elif isinstance(value, bool) or (isinstance(value, int) and value > 0):
            found[name] = value
    return found


def _declared(image_processor: Any) -> dict[str, Any]:
    """The processor's declared kwargs whose type is plainly ``bool`` or ``int`` (with or without None)."""
    import typing

    try:
        hints = typing.get_type_hints(image_processor.valid_kwargs)
    except Exception:  # noqa: BLE001 - a processor without typed kwargs
        return {}
    plain = {}
    for name, hint in hints.items():
        args = set(typing.get_args(hint)) - {type(None)} or {hint}
        if args in ({bool}, {int}):
            plain[name] = args.pop()
    return plain


def setting(name: str, value: int | bool, low: int | None = None, high: int | None = None) -> ControlSetting:
    """The control for ``name``: a checkbox, or a slider around the checkpoint's value (``low``..``high``)."""
    label = f"{name} (from the processor)"
    if isinstance(value, bool):
        return ControlSetting(kwarg=name, label=label)
    divisor = PIXEL_COUNT[1] if value > PIXEL_COUNT[0] else RANGE[0]
    low = max(1, value // divisor) if low is None else low
    high = value * RANGE[1] if high is None else high
    return ControlSetting(kwarg=name, label=label, min=low, max=high, step=max(1, (high - low) // SLIDER_STEPS))


def probe_pictures() -> tuple[Image.Image, Image.Image]:
    """A wide 1280x720 picture and a small 64x48 one, with some structure: a limit binds one or the other."""
    picture = Image.radial_gradient("L").convert("RGB")
    return picture.resize((1280, 720)), picture.resize((64, 48))


class _Probe:
    """Renders of the probe pictures through ``renderer`` under given kwargs: which ids each gives."""

    def __init__(self, renderer: Any, dicts: Mapping[str, Mapping[str, int]]):
        self.renderer = renderer
        self.dicts = dicts
        pictures = [{"type": "image_pil", "image_pil": p} for p in probe_pictures()]
        self.messages = [{"role": "user", "content": [*pictures, {"type": "text", "text": "What are these?"}]}]

    async def ids(self, kwargs: Mapping[str, Any], in_scope: frozenset[str] = frozenset()) -> tuple[int, ...] | None:
        """The prompt's ids under ``kwargs``; None where the processor or the model refuses them, or the prompt
        does not fit."""
        renderer = self.renderer
        t0 = time.monotonic()
        try:
            sent = processor_kwargs(image_scoped(kwargs, in_scope), self.dicts)
            rendered = await renderer.render(self.messages, sent)
            log.debug("%s: %s rendered in %.2f s", renderer.spec.name, dict(kwargs), time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - a value the processor or the model refuses: not a control
            log.debug("%s: %s refused: %s", renderer.spec.name, dict(kwargs), exc)
            return None
        if len(rendered.prompt_token_ids) >= renderer.max_model_len:
            return None
        return tuple(rendered.prompt_token_ids)

    async def tried(self, name: str, value: int | bool,
                    context: Mapping[str, bool]) -> tuple[ControlSetting, bool] | None:
        """The control for ``name`` if every value renders and one gives other ids than ``context`` alone; with
        whether it goes to the image processor alone: a dict's key does where the model takes it so (its video
        processor keeps its own dict, and a server's start-up kwargs of either form do not override it)."""
        base = await self.ids(context)
        if base is None:
            return None
        for in_scope in ((True, False) if "." in name else (False,)):
            control = setting(name, value)
            scope = frozenset({name}) if in_scope else frozenset()
            tries = [not value] if isinstance(value, bool) else [control.min, control.max]
            got = [await self.ids({**context, name: v}, scope) for v in tries]
            if not isinstance(value, bool) and None in got:  # the wide range breaks: try a narrower one
                control = setting(name, value, max(1, value // 4), value * 2)
                got = [await self.ids({**context, name: v}, scope) for v in (control.min, control.max)]
            if None not in got and any(g != base for g in got):
                return control, in_scope
        return None


async def derive(renderer: Any) -> Derived:
    """The controls of ``renderer``'s model (an ``engine.renderer.Renderer``), checked by rendering."""
    info = renderer._renderer.get_mm_processor().info
    try:
        hf = info.get_hf_processor()
        names = set(info.get_supported_mm_processor_kwargs().get("images_kwargs", ()))
        image_processor = hf.image_processor
    except Exception as exc:  # noqa: BLE001 - a processor of vLLM's own declares nothing
        log.info("%s: no processor kwargs to derive controls from (%s)", renderer.spec.name, exc)
        return Derived((), {}, {})
    # the processor's own defaults for what the checkpoint leaves unset (its ProcessingKwargs' images_kwargs)
    defaults = getattr(getattr(type(hf), "valid_processor_kwargs", None), "_defaults", {}).get("images_kwargs", {})
    found = candidates(image_processor, names, defaults)
    dicts = {name.partition(".")[0]: dict(getattr(image_processor, name.partition(".")[0]))
             for name in found if "." in name}
    dicts = {k: {n: v for n, v in (d.items() if isinstance(d, Mapping) else ())} for k, d in dicts.items()}
    probe = _Probe(renderer, dicts)
    controls: list[ControlSetting] = []
    scoped: set[str] = set()
    unchanged: list[str] = []
    for name, value in sorted(found.items(), key=lambda item: not isinstance(item[1], bool)):  # checkboxes first
        kept = await probe.tried(name, value, {})
        if kept is None:
            unchanged.append(name)
            continue
        controls.append(kept[0])
        if kept[1]:
            scoped.add(name)
    # a number that changes nothing alone may change tokens once a checkbox is on (Gemma 3's
    # pan_and_scan_max_num_crops with do_pan_and_scan): offered, said so in its label
    switches = {c.kwarg: not found[c.kwarg] for c in controls if c.kind == "bool"}
    for name in [n for n in unchanged if not isinstance(found[n], bool)]:
        for switch, on in switches.items():
            kept = await probe.tried(name, found[name], {switch: on})
            if kept is not None:
                label = f"{name} (from the processor; with {switch} {'on' if on else 'off'})"
                controls.append(replace(kept[0], label=label))
                if kept[1]:
                    scoped.add(name)
                break
    controls.sort(key=lambda c: c.kwarg)
    values = {c.kwarg: found[c.kwarg] for c in controls}
    aliases = await _aliases(probe, controls, names, frozenset(scoped))
    return Derived(tuple(controls), values, {k: d for k, d in dicts.items() if any(c.kwarg.startswith(f"{k}.")
                                                                                   for c in controls)},
                   frozenset(scoped), aliases)


async def _aliases(probe: _Probe, controls: list[ControlSetting], names: set[str],
                   scoped: frozenset[str]) -> dict[str, str]:
    """The ``PIXEL_ALIASES`` the model honours: the processor declares the name, and the name (sent as the checkpoint's
    docs give it, plain) renders what the edge renders at each end of its slider, one of them other ids than none."""
    kept: dict[str, str] = {}
    base = await probe.ids({})
    for alias, target in PIXEL_ALIASES.items():
        control = next((c for c in controls if c.kwarg == target), None)
        if control is None or alias not in names:
            continue
        scope = frozenset({target}) & scoped
        wanted = [await probe.ids({target: v}, scope) for v in (control.min, control.max)]
        got = [await probe.ids({alias: v}) for v in (control.min, control.max)]
        if None not in wanted and got == wanted and any(w != base for w in wanted):
            kept[alias] = target
    return kept
