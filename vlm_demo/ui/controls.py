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
from ..intake import DocumentOptions
from ..settings import DOCUMENT_DPI_RANGE, VIDEO_NUM_FRAMES, Settings
from .contract import (APP_OPTIONS, DOCUMENT_OPTIONS, VIDEO_OPTIONS, control_input, control_names, document_defaults,
                       takes_video, video_defaults)


def user_error(message: str) -> gr.Error:
    """What the page shows a person for a ``VlmDemoError`` (or a bad input): Gradio's error toast, without the
    traceback Gradio 6.31 otherwise prints to the app's log for every ``gr.Error`` (a person's bad input is no
    bug of the app)."""
    return gr.Error(message, print_exception=False)


def from_the_page(request: gr.Request | None) -> bool:
    """Whether an event comes from the page itself (a person), not from a program (``gradio_client``: "api", an MCP
    tool: "mcp"): Gradio 6.31's page sends its own events with the header ``x-gradio-user: app``."""
    headers = getattr(request, "headers", None) or {}
    return headers.get("x-gradio-user") == "app"


def refuse(request: gr.Request | None, message: str) -> None:
    """Tell of a refusal: to a program, the one-line error its call raises (``user_error``); to a person at the page,
    a toast that is no error (``gr.Warning``), beside what the page already says in place (the note by the message
    box, the prompt panel): an error ends the event with "Error" over each of its outputs, which hid those very notes
    until another event reached them."""
    if not from_the_page(request):
        raise user_error(message)
    gr.Warning(message)



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
        elif kind == "text":
            if payload is not None and not isinstance(payload, str):
                raise user_error(f"{name}: expected text, got {payload!r}")
        elif isinstance(payload, bool) or not isinstance(payload, (int, float)):
            raise user_error(f"{name}: expected a number, got {payload!r}")
        return payload
    component.preprocess = preprocess
    return component


@dataclasses.dataclass(frozen=True)
class Controls:
    """A model picker's controls: one component per processor kwarg any model offers (a slider, or a checkbox
    for a bool), shown for the models that have it; then the video sampling sliders (``VIDEO_OPTIONS``),
    shown for models that take video, and how documents are read (``DOCUMENT_OPTIONS``: a DPI slider, a pages
    box)."""

    models: Any
    """The profiles of the models whose controls these are (the service's: derived controls too); a registry is
    taken as its models' profiles resolved afresh."""
    settings: Settings
    """The app's settings (the video sliders' largest values)."""
    kwargs: tuple[str, ...]
    """The controls' names, in the order of ``components``."""
    components: Sequence[Any]
    """The controls' components."""
    side: str = ""
    """Whose controls: "" the main picker's, "a" or "b" Compare's sides (their input names: ``names``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", profile.Profiles.of(self.models))

    @property
    def registry(self) -> Any:
        """The models' entries."""
        return self.models.registry

    @classmethod
    def create(cls, models: Any, settings: Settings, model: str, side: str = "") -> Controls:
        """The controls of a picker on ``model``, built (their elements' ids: ``slider-<kwarg>``, or Compare's
        ``a-<kwarg>`` / ``b-<kwarg>``)."""
        models = profile.Profiles.of(models)
        shape = cls(models, settings, control_names(models), (), side)
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
        """The properties of control ``name`` (a processor kwarg or an ``APP_OPTIONS`` control) as ``model`` has
        it: shown or hidden, its label, its value and (a slider) its range. The page's one component per name
        takes these at build time and again, as a property update, whenever the model picker moves, so a switch
        never makes a component in an event handler."""
        found = self.models.get(model)
        spec = found.spec
        if name in DOCUMENT_OPTIONS:
            takes = spec.engine_args.limit_mm_per_prompt.get("image", 0) > 0
            start = document_defaults(found)[name]
            if name == "dpi":
                return {"minimum": DOCUMENT_DPI_RANGE[0], "maximum": DOCUMENT_DPI_RANGE[1], "step": 1, "value": start,
                        "visible": takes, "label": "dpi (a PDF's pages are rasterised at this resolution)"}
            if name == "each_page":
                return {"value": start, "visible": takes, "label": "each page on its own (one request per page, "
                        "sent together; else all pages in one request)"}
            return {"value": start, "visible": takes, "label": "pages (of each PDF: 1-3,7; empty: all, up to "
                    f"{self.settings.max_document_pages})", "placeholder": "all"}
        if name in VIDEO_OPTIONS:
            by_rate = video_sampling(found) == "fps"
            if name == "num_frames":
                return {"minimum": 1, "maximum": self.settings.max_video_frames, "step": 1, "value": VIDEO_NUM_FRAMES,
                        "visible": takes_video(spec) and not by_rate,
                        "label": "num_frames (frames sampled from each video)"}
            label = ("fps (frames sampled per second of video; this family's loader samples by rate)" if by_rate
                     else "fps (caps num_frames at this rate; 0: num_frames alone)")
            return {"minimum": 0, "maximum": self.settings.max_video_fps, "step": 0.5,
                    "value": video_defaults(found)["fps"], "visible": takes_video(spec), "label": label}
        # its own control by that very name: a name the checkpoint's docs give one of its controls (a derived
        # size.longest_edge's max_pixels) is taken in a request, but the page shows the setting once
        own = next((c for c in found.controls if c.kwarg == name), None)
        setting = own or self.setting(name)
        label = setting.label
        if setting.default is None:  # not sent until moved: whose value applies meanwhile
            follows = own is not None and found.inherited(name) is not None
            label += f" ({name.partition('.')[2]}'s until moved)" if follows else " (checkpoint's own until moved)"
        props = {"value": found.initial(name) if own else setting.initial, "label": label, "visible": own is not None}
        if setting.kind == "bool":
            return props
        return props | {"minimum": setting.min, "maximum": setting.max, "step": setting.step}

    def setting(self, kwarg: str) -> Any:
        """The first model's control setting for ``kwarg`` (the shape of a hidden control)."""
        return next(c for m in self.registry.models for c in self.models.get(m).controls if c.kwarg == kwarg)

    def kind(self, name: str) -> str:
        """"bool" (a checkbox), "int" or "number" (a slider) for control ``name``."""
        if name == "pages":
            return "text"
        if name == "each_page":
            return "bool"
        if name in VIDEO_OPTIONS or name == "dpi":
            return "int" if name in ("num_frames", "dpi") else "number"
        return self.setting(name).kind

    def component(self, model: str, name: str, **extra: Any) -> Any:
        """The component for control ``name``, as ``model`` has it (built once, with the page)."""
        props, kind = self.props(model, name), self.kind(name)
        make = {"bool": gr.Checkbox, "text": gr.Textbox}.get(kind, gr.Slider)
        made = make(**props, **extra)
        return typed_input(made, kind)

    def updates(self, model: str) -> list[Any]:
        """The controls' property updates after the model picker moved to ``model``."""
        return [gr.update(**self.props(model, k)) for k in self.kwargs]

    def mm_kwargs(self, model: str, values: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        """The per-request kwargs the controls' ``values`` (``by_kwarg``) ask for under ``model``, each checked
        against its control's type and range: only the model's own controls, and only those with a default or
        moved (an unmoved control with no default leaves the checkpoint's own value)."""
        found = self.models.get(model)
        chosen = {}
        for kwarg, value in self.by_kwarg(values).items():
            own = found.control(kwarg)
            if own is None or value is None or kwarg in APP_OPTIONS:
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


    def each_page(self, values: Mapping[str, Any] | Sequence[Any]) -> bool:
        """Whether the controls' ``values`` ask for each document page on its own."""
        return bool(self.by_kwarg(values).get("each_page"))

    def documents(self, values: Mapping[str, Any] | Sequence[Any]) -> DocumentOptions:
        """How the controls' ``values`` (``by_kwarg``) read documents (the intake checks them)."""
        chosen = self.by_kwarg(values)
        dpi = chosen.get("dpi")
        return DocumentOptions(dpi=int(dpi) if isinstance(dpi, float) and dpi.is_integer() else dpi,  # type: ignore[arg-type]
                               pages=chosen.get("pages") or "")


def _typed(control: Any, value: Any) -> Any:
    """A control's value as its kind (a slider sends whole numbers as floats), checked: ``InputError`` says why not."""
    if control.kind == "int" and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        control.check(value)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return value

