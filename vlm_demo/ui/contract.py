"""The page's API contract: each endpoint's inputs and outputs by name, in the order ``gradio_client`` sends and
receives them, and the controls a model picker offers (their names, where the video sliders start). Gradio-free:
a client builds its calls with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import profile
from ..service import documents_of, video_sampling
from ..settings import MAX_TOKENS_SLIDER, VIDEO_FPS, VIDEO_NUM_FRAMES

PANEL_OUTPUTS = ("prompt", "runs", "table", "gallery", "budget")
"""The prompt and expansion panels."""
CHAT_OUTPUTS = ("chat", "stats", "stats_data", "boxes", "message_note")
"""What ``/chat`` and ``/retry`` stream, in this order (read them by name with ``named_outputs``): what changes
while the answer streams. Gradio's cost per streamed update grows with its outputs (each is post-processed,
its files checked, in a worker thread), and an output left out of an update costs more still (a property
update rebuilds its configuration), so the panels of the same render have their own event (``/panels``)."""
RENDER_OUTPUTS = (*PANEL_OUTPUTS, "export_json", "export_curl", "export_py")
"""What ``/panels`` returns: the panels of the render the session's last answer was generated from, and its Export
where the session has Export open (else Export's boxes empty: ``/export`` builds it)."""
INSPECT_OUTPUTS = (*PANEL_OUTPUTS, "stats", "message_note")
"""What ``/inspect`` returns, in this order (``message_note``: why the message could not be sent as it stands, "" where
it can)."""
COMPARE_OUTPUTS = ("compare_a", "compare_a_gallery", "compare_b", "compare_b_gallery")
"""What ``/compare`` returns, in this order."""
EXPORT_OUTPUTS = ("export_json", "export_curl", "export_py")
"""Export's three boxes."""
API_OUTPUTS = {"chat": CHAT_OUTPUTS, "retry": CHAT_OUTPUTS, "panels": RENDER_OUTPUTS, "export": EXPORT_OUTPUTS,
               "inspect": INSPECT_OUTPUTS,
               "compare": COMPARE_OUTPUTS, "undo": ("chat", "stats", "boxes", *EXPORT_OUTPUTS),
               "clear": ("chat", *PANEL_OUTPUTS, "stats", "boxes", *EXPORT_OUTPUTS)}
"""Each API endpoint's outputs by name."""


def named_outputs(api_name: str, values: Any) -> dict[str, Any]:
    """One result of the page's API (``gradio_client``'s tuple, or a single value) by output name."""
    names = API_OUTPUTS[api_name.strip("/")]
    values = values if isinstance(values, (list, tuple)) and len(names) > 1 else [values]
    return {name: value["value"] if isinstance(value, dict) and value.get("__type__") == "update" and "value" in value
            else value for name, value in zip(names, values, strict=True)}


SAMPLING_INPUTS = ("temperature", "top_p", "max_tokens", "seed")
"""The sampling sliders' inputs (``seed`` -1: random)."""
STATE_INPUTS = ("conversation",)
"""Inputs that are the session's own state: the handlers take them, ``gradio_client`` sends no value for them."""


def control_input(kwarg: str, side: str = "") -> str:
    """The input name of control ``kwarg``: the kwarg itself for the main picker, ``kwarg_a`` / ``kwarg_b`` for
    Compare's sides (as ``model_a`` / ``model_b``)."""
    return f"{kwarg}_{side}" if side else kwarg


def endpoint_inputs(api_name: str, kwargs: Sequence[str]) -> tuple[str, ...]:
    """An endpoint's inputs by name, in the order ``gradio_client`` sends them (``STATE_INPUTS`` aside); the
    handlers take them by these names. ``kwargs``: the controls' names (``control_names``)."""
    controls = tuple(control_input(k) for k in kwargs)
    name = api_name.strip("/")
    if name == "chat":
        names = ("message", "conversation", "model", "system", *SAMPLING_INPUTS, *controls, "urls", "detect")
    elif name == "retry":
        names = ("conversation", "model", "system", *SAMPLING_INPUTS, *controls, "detect")
    elif name == "inspect":
        names = ("message", "conversation", "model", "system", *controls, "urls")
    elif name == "compare":
        names = ("message", "conversation", "urls", "model_a", *(control_input(k, "a") for k in kwargs),
                 "model_b", *(control_input(k, "b") for k in kwargs))
    else:
        raise ValueError(f"no inputs helper for {api_name!r}")
    if len(set(names)) != len(names):  # (a control named as another input)
        raise ValueError(f"{name}: an input name twice in {names}")
    return names


def api_inputs(registry: Any, api_name: str, model: str, message: dict[str, Any] | None = None, *,
               system: str = "", temperature: float | None = None, top_p: float | None = None,
               max_tokens: int | None = None, seed: int = -1, urls: str = "", controls: dict[str, Any] | None = None,
               model_b: str | None = None, controls_b: dict[str, Any] | None = None, detect: str = "") -> list[Any]:
    """The inputs of one of the page's API endpoints, by name, in the order ``gradio_client`` sends them.
    ``controls``: image settings by kwarg, ``num_frames`` / ``fps`` for videos and ``dpi`` / ``pages`` for
    documents (the model's initial values otherwise); sampling defaults are the
    model's own. ``model_b``/``controls_b``: Compare's side B. ``detect``: what Detect mode finds ("": off)."""
    models = profile.Profiles.of(registry)
    registry = models.registry
    kwargs = control_names(models)

    def control_values(name: str, chosen: dict[str, Any] | None, side: str = "") -> dict[str, Any]:
        found = models.get(name)
        first = {c.kwarg: c.initial for m in reversed(registry.models) for c in models.get(m).controls}  # hidden
        first.update(video_defaults(found) | document_defaults(found))
        return {control_input(k, side): (chosen or {}).get(k, found.initial(k) if found.control(k) else first[k])
                for k in kwargs}
    default = registry.get(model).sampling
    other = model_b or model
    values = {"message": message or {"text": "", "files": []}, "model": model, "system": system,
              "temperature": default.temperature if temperature is None else temperature,
              "top_p": default.top_p if top_p is None else top_p,
              "max_tokens": default.max_tokens if max_tokens is None else max_tokens, "seed": seed, "urls": urls,
              "detect": detect, "model_a": model, "model_b": other,
              **control_values(model, controls), **control_values(model, controls, "a"),
              **control_values(other, controls_b, "b")}
    return [values[name] for name in endpoint_inputs(api_name, kwargs) if name not in STATE_INPUTS]


VIDEO_OPTIONS = ("num_frames", "fps")
"""The video sampling controls (vLLM's per-request ``media_io_kwargs["video"]``), after the processor kwargs."""
DOCUMENT_OPTIONS = ("dpi", "pages", "each_page")
"""How documents are read (the app's, not vLLM's: a page reaches vLLM as a picture): the rasterising resolution,
which pages ("1-3,7"; "": all) and whether each page is asked on its own, after the video controls."""
APP_OPTIONS = (*VIDEO_OPTIONS, *DOCUMENT_OPTIONS)
"""The controls that are no processor kwarg."""


def control_names(models: Any) -> tuple[str, ...]:
    """The names of a picker's controls, in order: every model's processor kwargs (``models``: their profiles, or a
    registry), then ``VIDEO_OPTIONS`` and ``DOCUMENT_OPTIONS``."""
    models = profile.Profiles.of(models)
    return (*sorted({c.kwarg for spec in models.registry.models for c in models.get(spec).controls}), *APP_OPTIONS)


def document_defaults(model: Any) -> dict[str, Any]:
    """Where the document controls start for ``model`` (its profile or entry): its family's DPI where its checkpoint
    documents one, every page."""
    return {"dpi": documents_of(model).dpi, "pages": "", "each_page": False}


def max_tokens_limit(spec: Any) -> int:
    """The top of the max_tokens slider for ``spec``: its context window (an answer cannot be longer; the service cuts
    a request's to the room its prompt leaves), or ``MAX_TOKENS_SLIDER`` where the entry does not say."""
    return max(spec.engine_args.max_model_len or MAX_TOKENS_SLIDER, spec.sampling.max_tokens)


def reader_tasks(model: Any) -> list[str]:
    """The task picker's choices for ``model`` (its profile or entry): its family's documented prompts by name (none
    for a chat model)."""
    return [task.name for task in profile.profile_of(model).adapter.tasks]


def task_prompt(model: Any, name: str) -> str | None:
    """The text the task ``name`` of ``model``'s family puts in the message box (its ``{what}`` said as "the title",
    to be edited), or None for a task the family does not have."""
    found = next((t for t in profile.profile_of(model).adapter.tasks if t.name == name), None)
    return None if found is None else found.prompt.replace("{what}", "the title")


def has_grounding(model: Any) -> bool:
    """Whether Detect mode is offered: the entry's family has a box format with a "where is X" question (a
    document reader's format has boxes but no Detect mode; its boxes are drawn with any answer)."""
    grounding = profile.profile_of(model).adapter.grounding
    return grounding is not None and grounding.detects


def takes_video(spec: Any) -> bool:
    """Whether the entry lets a prompt hold videos."""
    return spec.engine_args.limit_mm_per_prompt.get("video", 0) > 0


def video_defaults(model: Any) -> dict[str, Any]:
    """Where the video sliders start for ``model`` (its profile or entry; ``fps`` 0: not sent)."""
    by_rate = video_sampling(profile.profile_of(model)) == "fps"
    return {"num_frames": VIDEO_NUM_FRAMES, "fps": VIDEO_FPS if by_rate else 0}

