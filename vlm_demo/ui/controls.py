"""A model picker's controls: one Gradio component per setting name any model offers (a slider, or a checkbox for
a bool), each model's range, label and value as property updates, and the values they send checked and typed
into per-request kwargs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from .. import profile
from ..errors import InputError
from ..service import video_sampling
from ..settings import VIDEO_NUM_FRAMES, Settings
from .contract import VIDEO_OPTIONS, control_input, control_names, takes_video, video_defaults


def user_error(message: str) -> gr.Error:
    """What the page shows a person for a ``VlmDemoError`` (or a bad input): Gradio's error toast, without the
    traceback Gradio 6.31 otherwise prints to the app's log for every ``gr.Error`` (a person's bad input is no
    bug of the app)."""
    return gr.Error(message, print_exception=False)



def typed_input(component: Any, kind: str) -> Any:
    """``component`` (a slider or checkbox) taking its API input as it is, type-checked: a value of the wrong
    type is a one-line error instead of Gradio's ``TypeError`` from comparing it with the range. The range is
    checked against the chosen model's own control (``Controls.mm_kwargs``), not against the component's
    bounds, which are the page's first model's until the model picker moves (an API call may name another
    model without moving it). Wraps the instance's ``preprocess``; a subclass would make Gradio write a
    ``.pyi`` stub beside this module."""
    name = component.elem_id or component.label

    def preprocess(payload: Any) -> Any:
        if kind == "bool":
            if not isinstance(payload, bool):
                raise user_error(f"{name}: expected true or false, got {payload!r}")
        elif isinstance(payload, bool) or not isinstance(payload, (int, float)):
            raise user_error(f"{name}: expected a number, got {payload!r}")
        return payload
    component.preprocess = preprocess
    return component


@dataclasses.dataclass(frozen=True)
class Controls:
    """A model picker's controls: one component per processor kwarg any model offers (a slider, or a checkbox
    for a bool), shown for the models that have it; then the video sampling sliders (``VIDEO_OPTIONS``),
    shown for models that take video."""

    registry: Any
    """The models whose controls these are."""
    settings: Settings
    """The app's settings (the video sliders' largest values)."""
    kwargs: tuple[str, ...]
    """The controls' names, in the order of ``components``."""
    components: Sequence[Any]
    """The controls' components."""
    side: str = ""
    """Whose controls: "" the main picker's, "a" or "b" Compare's sides (their input names: ``names``)."""

    @classmethod
    def create(cls, registry: Any, settings: Settings, model: str, side: str = "") -> Controls:
        """The controls of a picker on ``model``, built (their elements' ids: ``slider-<kwarg>``, or Compare's
        ``a-<kwarg>`` / ``b-<kwarg>``)."""
        shape = cls(registry, settings, control_names(registry), (), side)
        return dataclasses.replace(shape, components=tuple(
            shape.component(model, k, elem_id=f"{side or 'slider'}-{k.replace('.', '-')}") for k in shape.kwargs))

    @property
    def names(self) -> tuple[str, ...]:
        """The controls' input names (the contract's ``control_input``), in the order of ``components``."""
        return tuple(control_input(k, self.side) for k in self.kwargs)

    def by_kwarg(self, values: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        """The controls' ``values`` by kwarg: from an event's inputs by input name (``names``; other inputs
        ignored), or a sequence in the order of ``kwargs``."""
        if isinstance(values, Mapping):
            return {kwarg: values[name] for kwarg, name in zip(self.kwargs, self.names, strict=True)}
        if len(values) != len(self.kwargs):
            raise InputError(f"expected {len(self.kwargs)} control values ({', '.join(self.kwargs)}), "
                             f"got {len(values)}")
        return dict(zip(self.kwargs, values, strict=True))

    def props(self, model: str, name: str) -> dict[str, Any]:
        """The properties of control ``name`` (a processor kwarg or a ``VIDEO_OPTIONS`` slider) as ``model`` has
        it: shown or hidden, its label, its value and (a slider) its range. The page's one component per name
        takes these at build time and again, as a property update, whenever the model picker moves, so a switch
        never makes a component in an event handler."""
        spec = self.registry.get(model)
        if name in VIDEO_OPTIONS:
            by_rate = video_sampling(spec) == "fps"
            if name == "num_frames":
                return {"minimum": 1, "maximum": self.settings.max_video_frames, "step": 1, "value": VIDEO_NUM_FRAMES,
                        "visible": takes_video(spec) and not by_rate,
                        "label": "num_frames (frames sampled from each video)"}
            label = ("fps (frames sampled per second of video; this family's loader samples by rate)" if by_rate
                     else "fps (caps num_frames at this rate; 0: num_frames alone)")
            return {"minimum": 0, "maximum": self.settings.max_video_fps, "step": 0.5,
                    "value": video_defaults(spec)["fps"], "visible": takes_video(spec), "label": label}
        found = profile.profile(spec)
        own = found.control(name)
        setting = own or self.setting(name)
        label = setting.label if setting.default is not None else f"{setting.label} (checkpoint's own until moved)"
        props = {"value": found.initial(name) if own else setting.initial, "label": label, "visible": own is not None}
        if setting.kind == "bool":
            return props
        return props | {"minimum": setting.min, "maximum": setting.max, "step": setting.step}

    def setting(self, kwarg: str) -> Any:
        """The first model's control setting for ``kwarg`` (the shape of a hidden control)."""
        return next(c for m in self.registry.models for c in profile.profile(m).controls if c.kwarg == kwarg)

    def kind(self, name: str) -> str:
        """"bool" (a checkbox), "int" or "number" (a slider) for control ``name``."""
        if name in VIDEO_OPTIONS:
            return "int" if name == "num_frames" else "number"
        return self.setting(name).kind

    def component(self, model: str, name: str, **extra: Any) -> Any:
        """The component for control ``name``, as ``model`` has it (built once, with the page)."""
        props, kind = self.props(model, name), self.kind(name)
        made = gr.Checkbox(**props, **extra) if kind == "bool" else gr.Slider(**props, **extra)
        return typed_input(made, kind)

    def updates(self, model: str) -> list[Any]:
        """The controls' property updates after the model picker moved to ``model``."""
        return [gr.update(**self.props(model, k)) for k in self.kwargs]

    def mm_kwargs(self, model: str, values: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        """The per-request kwargs the controls' ``values`` (``by_kwarg``) ask for under ``model``, each checked
        against its control's type and range: only the model's own controls, and only those with a default or
        moved (an unmoved control with no default leaves the checkpoint's own value)."""
        found = profile.profile(self.registry.get(model))
        chosen = {}
        for kwarg, value in self.by_kwarg(values).items():
            own = found.control(kwarg)
            if own is None or value is None or kwarg in VIDEO_OPTIONS:
                continue
            value = _typed(own, value)
            if own.default is not None or value != found.initial(kwarg):
                chosen[kwarg] = value
        return chosen

    def media_io(self, values: Mapping[str, Any] | Sequence[Any]) -> dict[str, dict[str, Any]]:
        """The video sampling options the controls' ``values`` (``by_kwarg``) ask for (``fps`` 0: not sent); the
        service checks their ranges."""
        chosen = self.by_kwarg(values)
        video: dict[str, Any] = {}
        frames, fps = chosen.get("num_frames"), chosen.get("fps")
        if frames is not None:
            video["num_frames"] = int(frames) if isinstance(frames, float) and frames.is_integer() else frames
        if fps not in (None, 0, 0.0):
            video["fps"] = fps
        return {"video": video} if video else {}


def _typed(control: Any, value: Any) -> Any:
    """A control's value as its kind (a slider sends whole numbers as floats), checked: ``InputError`` says why not."""
    if control.kind == "int" and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        control.check(value)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return value

