"""The Gradio UI: the only module that imports gradio.

It turns user input into a ``ChatRequest``, runs the chat service and renders its events into
three side-by-side panels: the rendered prompt, the placeholder expansion and the chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import html
import io
import itertools
import json
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from .errors import InputError, VlmDemoError
from .export import chat_completions_body, curl_command, python_snippet, serve_command
from . import profile
from .conversation import Conversation, Exchange, Stats, chat_messages
from .inspector import PROMPT_CSS, Expansion, Inspection, contact_sheet, draw_overlay, prompt_html, run_length_text
from . import intake
from .intake import VIDEO_SUFFIXES, ImageEmbeds, Recent, Video, image_digest, is_video_name, is_video_url
from .registry import Sampling
from .settings import (ENCODED_IMAGES_KEPT, PAGE_RENDERS_KEPT, STATUS_EVERY_S, VIDEO_FPS, VIDEO_NUM_FRAMES,
                       Settings)
from .families.grounding import Grounding
from .grounding import draw as draw_boxes
from .grounding import place
from .grounding import rows as box_rows
from .service import (ChatRequest, ChatService, Delta, Done, Failed, Rendered, Turn, Waiting, detect_request,
                      video_sampling)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
OVERLAYS = Path(tempfile.gettempdir()) / "vlm-demo-overlays"  # the expansion panel's pictures, named by content
BOX_HEADERS = ["label", "x1", "y1", "x2", "y2"]
TABLE_HEADERS = ["item", "token (id)", "count", "positions", "size → processed", "grid or frames"]
"""The expansion table's columns (few and short: the panel is a third of the page, a phone's width on a phone)."""
TABLE_WIDTHS = ["13%", "24%", "12%", "15%", "19%", "17%"]
"""Their widths: the table fits its panel, text wraps inside a cell (it used to scroll sideways)."""
CSS = """
.prompt { white-space: pre-wrap; overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: 12px;
          max-height: 420px; overflow: auto; margin: 0; }
mark.ph, mark.ph * { background: #ffd54f; color: #000; } mark.sp, mark.sp * { background: #cfd8dc; color: #000; }
@media (max-width: 720px) {  /* a phone: the model's name whole, its status under it, and the chat right after */
  #model-row { flex-direction: column; align-items: stretch; }
  #model-row > * { width: 100%; max-width: 100%; }
  #chat-panel { order: -1; }
}
.budget { display: flex; height: 18px; border-radius: 4px; overflow: hidden; background: #e8f5e9; }
.budget .image { background: #ff7043; } .budget .video { background: #ab47bc; } .budget .txt { background: #42a5f5; }
""" + PROMPT_CSS
GALLERY_HEIGHT = "clamp(270px, 60vw, 410px)"
"""The expansion pictures' height: one picture at a time, whole (a grid's cells are square and cut a wide
picture), about as tall as a 16:9 picture at the panel's width on a phone and on a desktop (measured: 97-98 %
of the box filled at 390 and 1600 px)."""
EXAMPLE_CLIP = "moving-square.webm"
"""The example video (made by ``assets/make_clip.py``)."""
EXAMPLES = [
    ("wide-street.png", "How many tiles does this wide image become, and what is written on the signs?"),
    ("bar-chart.png", "Which quarter had the highest sales, and by how much?"),
]


def user_error(message: str) -> gr.Error:
    """What the page shows a person for a ``VlmDemoError`` (or a bad input): Gradio's error toast, without the
    traceback Gradio 6.31 otherwise prints to the app's log for every ``gr.Error`` (a person's bad input is no
    bug of the app)."""
    return gr.Error(message, print_exception=False)


def _state_text(service: ChatService, name: str, starting: bool = False) -> str:
    """The status line: the model, where its engine stands (while it starts: the phase and seconds so far, bytes
    while downloading) and whether its weights are random. ``starting``: a start was just asked for."""
    spec = service.registry.get(name)
    note = " · **random weights**: answers are noise, prompts and token counts are real" if spec.random_weights else ""
    if spec.remote:
        state = f"**remote**: {spec.endpoint}"
    elif (progress := service.engines.progress(name)) is not None:
        state = f"**starting**: {progress.text()}"
    else:
        state = f"**{service.engines.state(name)}**"
        if starting and state != "**ready**":
            state = "**starting**"
        elif state == "**not loaded**":
            state += " (it starts at the first question)"
    return f"{spec.display_label} — engine: {state}{note}"


def budget_html(inspection: Inspection) -> str:
    """A bar: each modality's tokens, text tokens and free context of max_model_len."""
    b = inspection.budget
    pct = (lambda n: 100 * n / b.max_model_len) if b.max_model_len else (lambda n: 0)
    media = [(m, n) for m, n in b.media_tokens.items()] or [("image", 0)]
    title = ", ".join(f"{m} {n}" for m, n in media)
    bars = "".join(f'<div class="{m}" style="width:{pct(n):.2f}%"></div>' for m, n in media)
    words = " · ".join(f"{m} {n:,} ({pct(n):.1f}%)" for m, n in media)
    return (f'<div class="budget" title="{title}, text {b.text_tokens}, free {b.free}">{bars}'
            f'<div class="txt" style="width:{pct(b.text_tokens):.2f}%"></div></div>'
            f'<p class="budget-text">{b.total:,} of {b.max_model_len:,} tokens: {words} · '
            f'text {b.text_tokens:,} · free {b.free:,}</p>')


def image_table(inspection: Inspection) -> list[list[Any]]:
    """One row per multimodal item for the expansion table (``TABLE_HEADERS``)."""
    def size(e: Expansion) -> str:
        shown = f"{e.orig_size[0]}x{e.orig_size[1]}" if e.orig_size else "-"
        if e.processed_size and e.processed_size != e.orig_size:
            shown += f" → {e.processed_size[0]}x{e.processed_size[1]}"
        return shown

    def grid(e: Expansion) -> str:
        if e.modality == "video":
            return frames_text(e)
        shown = f"{e.grid[0]}x{e.grid[1]}" if e.grid else "-"
        return shown + (" + thumbnail" if e.thumbnail else "")
    return [[f"{e.modality} {e.index + 1}", f"{inspection.token_texts.get(e.token_id, e.placeholder)} ({e.token_id})", e.count,
             f"{e.offset}-{e.offset + e.length - 1}", size(e), grid(e)]
            for e in inspection.expansions()]


def frames_text(e: Expansion) -> str:
    """A video's sampling and grouping in words ("8 sampled at 0.00-3.92 s; 4 groups of 2 frames, 140 tokens
    each"); "-" for an image."""
    if e.modality != "video":
        return "-"
    sampled = "frames: sampled by the server" if e.num_frames is None else f"{e.num_frames} sampled"
    if e.timestamps_s:
        sampled += f" at {e.timestamps_s[0]:.2f}-{e.timestamps_s[-1]:.2f} s"
    groups = e.groups or ()
    each = f"{groups[0]} tokens each" if groups and len(set(groups)) == 1 else ", ".join(map(str, groups)) + " tokens"
    per = f" of {e.frames_per_group} frame{'s' if e.frames_per_group != 1 else ''}" if e.frames_per_group else ""
    return f"{sampled}; {len(groups)} group{'s' if len(groups) != 1 else ''}{per}, {each}"


def image_file(image: Image.Image, folder: Path) -> str:
    """``image`` as a PNG in ``folder``, named by its content and written whole (temp file, then rename).

    Gradio's own caching of PIL outputs rewrites one shared file in place, and a concurrent download of the
    same picture (16 users, one image) could read it half-written."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    data = buf.getvalue()
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.png"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    return str(path)


_OVERLAY_FILES = Recent(ENCODED_IMAGES_KEPT)


def overlay_file(image: Image.Image, expansion: Expansion, center_crop: bool) -> str:
    """The expansion picture of one image (its grid or crop drawn over it) as a file; drawn and encoded once
    per picture and grid (all ``draw_overlay`` reads), since every turn shows the earlier images again."""
    def draw() -> str:
        return image_file(draw_overlay(image, expansion, center_crop=center_crop), OVERLAYS)
    key = (image_digest(image), expansion.grid, center_crop)
    path = _OVERLAY_FILES.get(key, draw)
    return path if os.path.exists(path) else draw()  # type: ignore[arg-type]  # (a cleaned temp folder)


def panels(service: ChatService, inspection: Inspection, images: list[Any]) -> dict[str, Any]:
    """Values of the prompt and expansion panels for one inspection."""
    center_crop = profile.adapter(service.registry.get(inspection.model)).center_crop
    who = "vLLM inserted the placeholders" if inspection.content_format == "string" else "the template emits them"
    header = f'<p class="content-format">content format: <b>{inspection.content_format}</b> ({who})</p>'
    header += f'<p class="sent-settings">{html.escape(settings_text(inspection))}</p>'
    if inspection.geometry_note:
        header += f'<p class="geometry-note">{inspection.geometry_note}: counts, ids and ranges are vLLM\'s; no grid drawn</p>'

    gallery = [(overlay_file(img, im, center_crop),
                f"image {im.index + 1}: {im.count} tokens" + (f", {im.grid[0]}x{im.grid[1]}" if im.grid else ""))
               for img, im in zip(images, inspection.items.get("image", ()), strict=False)
               if not isinstance(img, ImageEmbeds)]
    for video in inspection.items.get("video", ()):
        thumbnails = _nth_frames(inspection, video.index)
        if thumbnails:
            gallery.append((image_file(contact_sheet(video, thumbnails), OVERLAYS),
                            f"video {video.index + 1}: {frames_text(video)}"))
    return {"prompt": header + prompt_html(inspection, inspection.special_tokens), "runs": run_length_text(inspection),
            "table": image_table(inspection), "gallery": opened(gallery), "budget": budget_html(inspection)}


def opened(gallery: list[Any]) -> Any:
    """A gallery's pictures with the first one open, whole (Gradio shows new pictures as a grid of square cells,
    which cut a wide picture and its grid; ``preview`` holds only for the value given at build time)."""
    return gr.update(value=gallery, selected_index=0) if gallery else []


def settings_text(inspection: Inspection) -> str:
    """The per-request settings the render went with, as vLLM got them: "processor kwargs: max_pixels=401408 ·
    video sampling: fps=2" ("processor kwargs: none (the checkpoint's own)" without any)."""
    def pairs(values: Any, scope: str = "") -> str:  # nested kwargs as the controls name them (videos_kwargs.x)
        return ", ".join(pairs(v, f"{scope}{k}.") if isinstance(v, dict) else
                         f"{scope}{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in values.items())
    line = f"processor kwargs: {pairs(inspection.mm_kwargs) or 'none'}"
    line += " (the checkpoint's own config for the rest)" if inspection.mm_kwargs else " (the checkpoint's own config)"
    for modality, options in inspection.media_io.items():
        if options:
            line += f" · {modality} sampling: {pairs(options)}"
    return line


@dataclasses.dataclass
class Boxes:
    """The boxes and points of one streaming answer, drawn on the picture they refer to (the conversation's last
    image), in its own pixels with the geometry the engine's processor reported."""

    grounding: Grounding
    image: Image.Image
    expansion: Expansion
    drawn: tuple[tuple[Any, ...], str | None] = ((), None)
    """The last items placed and their picture (drawn again only when they change)."""

    @classmethod
    def of(cls, spec: Any, request: ChatRequest, inspection: Inspection) -> Boxes | None:
        """The answer's boxes where the family has a format and the conversation an image, else None."""
        grounding = profile.adapter(spec).grounding
        images = [im for t in request.turns for im in t.media.get("image", ())]
        expansions = inspection.items.get("image", ())
        if grounding is None or not images or not expansions or not isinstance(images[-1], Image.Image):
            return None
        return cls(grounding, images[-1], expansions[-1])

    def update(self, answer: str) -> tuple[str | None, list[list[Any]]]:
        """The picture (a PNG file, None without items) and the table rows for the answer so far."""
        placed = place(self.grounding.parse(answer), self.grounding, self.image.size, self.expansion.processed_size)
        if placed != self.drawn[0]:
            self.drawn = (placed, image_file(draw_boxes(self.image, placed), OVERLAYS) if placed else None)
        return self.drawn[1], box_rows(placed)


async def _with_boxes(boxes: Boxes | None, conversation: Conversation,
                      shown: dict[str, Any]) -> tuple[Conversation, dict[str, Any]]:
    """The conversation and panel values with the answer's boxes (drawn in a worker thread)."""
    if boxes is None or not conversation.exchanges:
        return conversation, shown
    figure, table = await asyncio.to_thread(boxes.update, conversation.exchanges[-1].answer)
    return conversation.with_last(figure=figure), shown | {"boxes": table}


def _nth_frames(inspection: Inspection, index: int) -> tuple[Any, ...]:
    found = inspection.frames.get("video", ())
    return found[index] if index < len(found) else ()


def stats_data(stats: Stats | None, status: str, marks: dict[str, float] | None = None) -> dict[str, Any]:
    """The answer's figures as data (the ``stats_data`` output), with where the answer stands, and when done
    the ``marks``: wall-clock times (``time.time()``) at which the handler started, had read the message, got
    the render, had the panels, and yielded the first answer text (the benchmark's first-token steps)."""
    return {"status": status, **(dataclasses.asdict(stats) if stats else {}), **({"marks": marks} if marks else {})}


def stats_text(stats: Stats, stopped: bool = False) -> str:
    """The stats line under the chat: the wait for the engine's start (where there was one) apart from the time to
    first token; for a stopped answer, how far it went."""
    waited = f"waited **{stats.wait_s:.1f} s** for the engine to start · " if stats.wait_s >= 0.05 else ""
    if stopped and not stats.tokens:
        return f"{waited}**stopped** before the first token"
    line = (f"{waited}{'**stopped** after ' if stopped else ''}{stats.tokens} tokens · time to first token "
            f"**{stats.ttft_s:.2f} s** · **{stats.tokens_per_s:.1f} tokens/s**")
    if not stopped:
        line += f" · finish: {stats.finish_reason}"
    if stats.reasoning_tokens:
        line += f" · reasoning {stats.reasoning_tokens} tokens"
    if stats.prompt_tokens:
        line += f" · prompt {stats.prompt_tokens:,} tokens, {stats.cached_tokens:,} from vLLM's prefix cache"
    return line


def stats_of(done: Done) -> Stats:
    """The figures of a finished answer."""
    return Stats(tokens=done.num_tokens, ttft_s=done.ttft_s, tokens_per_s=done.tokens_per_s,
                 finish_reason=done.finish_reason, prompt_tokens=done.prompt_tokens, cached_tokens=done.cached_tokens,
                 reasoning_tokens=done.reasoning_tokens, wait_s=done.wait_s)


def waiting_text(event: Waiting) -> str:
    """The stats line while a question waits for its model's engine to start."""
    return f"waiting for the {event.model} engine to start: {event.phase} (the panels show vLLM's render already)"


PANEL_OUTPUTS = ("prompt", "runs", "table", "gallery", "budget")
"""The prompt and expansion panels."""
CHAT_OUTPUTS = ("chat", "stats", "stats_data", "boxes")
"""What ``/chat`` and ``/retry`` stream, in this order (read them by name with ``named_outputs``): what changes
while the answer streams. Gradio's cost per streamed update grows with its outputs (each is post-processed,
its files checked, in a worker thread), and an output left out of an update costs more still (a property
update rebuilds its configuration), so the panels of the same render have their own event (``/panels``)."""
RENDER_OUTPUTS = (*PANEL_OUTPUTS, "export_json", "export_curl", "export_py")
"""What ``/panels`` returns: the panels and Export of the render the session's last answer was generated from."""
INSPECT_OUTPUTS = (*PANEL_OUTPUTS, "stats")
"""What ``/inspect`` returns, in this order."""
COMPARE_OUTPUTS = ("compare_a", "compare_a_gallery", "compare_b", "compare_b_gallery")
"""What ``/compare`` returns, in this order."""
EXPORT_OUTPUTS = ("export_json", "export_curl", "export_py")
"""Export's three boxes."""
API_OUTPUTS = {"chat": CHAT_OUTPUTS, "retry": CHAT_OUTPUTS, "panels": RENDER_OUTPUTS, "inspect": INSPECT_OUTPUTS,
               "compare": COMPARE_OUTPUTS, "undo": ("chat", *EXPORT_OUTPUTS),
               "clear": ("chat", *PANEL_OUTPUTS, "stats", "boxes", *EXPORT_OUTPUTS)}
"""Each API endpoint's outputs by name."""


def named_outputs(api_name: str, values: Any) -> dict[str, Any]:
    """One result of the page's API (``gradio_client``'s tuple, or a single value) by output name."""
    names = API_OUTPUTS[api_name.strip("/")]
    values = values if isinstance(values, (list, tuple)) and len(names) > 1 else [values]
    return {name: value["value"] if isinstance(value, dict) and value.get("__type__") == "update" and "value" in value
            else value for name, value in zip(names, values, strict=True)}


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


def api_inputs(registry: Any, api_name: str, model: str, message: dict[str, Any] | None = None, *,
               system: str = "", temperature: float | None = None, top_p: float | None = None,
               max_tokens: int | None = None, seed: int = -1, urls: str = "", controls: dict[str, Any] | None = None,
               model_b: str | None = None, controls_b: dict[str, Any] | None = None, detect: str = "") -> list[Any]:
    """The inputs of one of the page's API endpoints, by name, in the order ``gradio_client`` sends them.
    ``controls``: image settings by kwarg, and ``num_frames`` / ``fps`` for videos (the model's initial values
    otherwise); sampling defaults are the
    model's own. ``model_b``/``controls_b``: Compare's side B. ``detect``: what Detect mode finds ("": off)."""
    kwargs = control_names(registry)

    def control_values(name: str, chosen: dict[str, Any] | None) -> list[Any]:
        spec = registry.get(name)
        first = {c.kwarg: c.initial for m in reversed(registry.models) for c in profile.profile(m).controls}  # hidden
        first.update(video_defaults(spec))
        found = profile.profile(spec)
        return [(chosen or {}).get(k, found.initial(k) if found.control(k) else first[k]) for k in kwargs]
    default = registry.get(model).sampling
    sampling = [default.temperature if temperature is None else temperature, default.top_p if top_p is None else top_p,
                default.max_tokens if max_tokens is None else max_tokens, seed]
    message = message or {"text": "", "files": []}
    name = api_name.strip("/")
    if name == "chat":
        return [message, model, system, *sampling, *control_values(model, controls), urls, detect]
    if name == "retry":
        return [model, system, *sampling, *control_values(model, controls), detect]
    if name == "inspect":
        return [message, model, system, *control_values(model, controls), urls]
    if name == "compare":
        other = model_b or model
        return [message, urls, model, *control_values(model, controls), other, *control_values(other, controls_b)]
    raise ValueError(f"no inputs helper for {api_name!r}")


VIDEO_OPTIONS = ("num_frames", "fps")
"""The video sampling controls (vLLM's per-request ``media_io_kwargs["video"]``), after the processor kwargs."""


def control_names(registry: Any) -> tuple[str, ...]:
    """The names of a picker's controls, in order: every model's processor kwargs, then ``VIDEO_OPTIONS``."""
    return (*sorted({c.kwarg for spec in registry.models for c in profile.profile(spec).controls}), *VIDEO_OPTIONS)


def has_grounding(spec: Any) -> bool:
    """Whether the entry's family has a box format the app reads (Detect mode is offered)."""
    return profile.adapter(spec).grounding is not None


def takes_video(spec: Any) -> bool:
    """Whether the entry lets a prompt hold videos."""
    return spec.engine_args.limit_mm_per_prompt.get("video", 0) > 0


def video_defaults(spec: Any) -> dict[str, Any]:
    """Where the video sliders start for ``spec`` (``fps`` 0: not sent)."""
    return {"num_frames": VIDEO_NUM_FRAMES, "fps": VIDEO_FPS if video_sampling(spec) == "fps" else 0}


@dataclasses.dataclass
class Controls:
    """A model picker's controls: one component per processor kwarg any model offers (a slider, or a checkbox
    for a bool), shown for the models that have it; then the video sampling sliders (``VIDEO_OPTIONS``),
    shown for models that take video."""

    registry: Any
    settings: Settings
    kwargs: tuple[str, ...]
    """The controls' names, in the order of ``components``."""
    components: list[Any]
    """The controls' components."""

    @classmethod
    def create(cls, registry: Any, settings: Settings, model: str, elem_prefix: str | None = None) -> Controls:
        made = cls(registry, settings, control_names(registry), [])
        made.components = [made.component(model, k, elem_id=f"{elem_prefix}-{k.replace('.', '-')}" if elem_prefix
                                          else None) for k in made.kwargs]
        return made

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

    def mm_kwargs(self, model: str, values: Sequence[Any]) -> dict[str, Any]:
        """The per-request kwargs the controls' ``values`` ask for under ``model``, each checked against its
        control's type and range: only the model's own controls, and only those with a default or moved
        (an unmoved control with no default leaves the checkpoint's own value)."""
        found = profile.profile(self.registry.get(model))
        if len(values) != len(self.kwargs):
            raise InputError(f"expected {len(self.kwargs)} control values ({', '.join(self.kwargs)}), "
                             f"got {len(values)}")
        chosen = {}
        for kwarg, value in zip(self.kwargs, values, strict=True):
            own = found.control(kwarg)
            if own is None or value is None or kwarg in VIDEO_OPTIONS:
                continue
            value = _typed(own, value)
            if own.default is not None or value != found.initial(kwarg):
                chosen[kwarg] = value
        return chosen

    def media_io(self, values: Sequence[Any]) -> dict[str, dict[str, Any]]:
        """The video sampling options the controls' ``values`` ask for (``fps`` 0: not sent); the service
        checks their ranges."""
        chosen = dict(zip(self.kwargs, values, strict=True))
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


@dataclasses.dataclass
class Page:
    """The page's components by name (see ``layout``)."""

    model: Any
    engine_state: Any
    state: Any
    rendered: Any
    """The session's last render for an answer, as ``(serial, clear the message box)`` (its change shows the
    panels and clears the box)."""
    system: Any
    controls: Controls
    temperature: Any
    top_p: Any
    max_tokens: Any
    seed: Any
    inspect_btn: Any
    prompt: Any
    budget: Any
    runs: Any
    table: Any
    gallery: Any
    chat: Any
    box: Any
    urls: Any
    stats: Any
    stats_data: Any
    detect: Any
    boxes: Any
    stop_btn: Any
    retry_btn: Any
    undo_btn: Any
    clear_btn: Any
    export_json: Any
    export_curl: Any
    export_py: Any
    model_a: Any
    controls_a: Controls
    model_b: Any
    controls_b: Any
    compare_btn: Any
    compare_a: Any
    compare_a_gallery: Any
    compare_b: Any
    compare_b_gallery: Any
    timer: Any
    """Asks for the status line every ``STATUS_EVERY_S`` (each second while the engine starts)."""

    def out(self, names: Sequence[str]) -> list[Any]:
        """Components by name."""
        return [getattr(self, n) for n in names]

    def values(self, **values: Any) -> dict[Any, Any]:
        """An update keyed by component, from values keyed by name."""
        return {getattr(self, name): value for name, value in values.items()}

    @property
    def sampling(self) -> list[Any]:
        return [self.temperature, self.top_p, self.max_tokens, self.seed]


def layout(service: ChatService, default_model: str) -> Page:
    """The components, placed: model bar; settings | prompt and expansion panels | chat; examples,
    export and compare below. Call inside ``gr.Blocks``."""
    registry, settings = service.registry, service.settings
    choices = [(spec.display_label, spec.name) for spec in registry.models]
    spec = registry.get(default_model)
    gr.Markdown("# vlm-demo\nChat with a vision-language model served by vLLM and see exactly what the "
                "engine receives: the rendered prompt, each image's tokens, and the streamed answer.")
    parts: dict[str, Any] = {"state": gr.State(Conversation()), "rendered": gr.State((0, False))}
    with gr.Row(elem_id="model-row"):
        parts["model"] = gr.Dropdown(choices=choices, value=default_model, label="Model", scale=2, min_width=260,
                                     elem_id="model")
        parts["engine_state"] = gr.Markdown(_state_text(service, default_model), elem_id="engine-state",
                                            min_width=260)
    parts["timer"] = gr.Timer(STATUS_EVERY_S[1])
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=260, elem_id="settings-panel"):
            parts["system"] = gr.Textbox(label="System prompt", placeholder="(the chat template's default)", lines=2)
            parts["controls"] = Controls.create(registry, settings, default_model, elem_prefix="slider")
            with gr.Accordion("Sampling", open=False, elem_id="sampling"):
                parts["temperature"] = gr.Slider(0, 2, value=spec.sampling.temperature, step=0.05, label="temperature")
                parts["top_p"] = gr.Slider(0.05, 1, value=spec.sampling.top_p, step=0.05, label="top_p")
                parts["max_tokens"] = gr.Slider(1, 2048, value=spec.sampling.max_tokens, step=1, label="max_tokens",
                                                elem_id="max-tokens")
                parts["seed"] = gr.Number(value=-1, precision=0, label="seed (-1: random)", elem_id="seed")
            parts["detect"] = gr.Textbox(label="Detect: what to find (the answer is held to the model's own box format)",
                                         placeholder="e.g. the red square", lines=1, elem_id="detect",
                                         visible=has_grounding(spec))
            parts["inspect_btn"] = gr.Button("Inspect only", elem_id="inspect")
        with gr.Column(scale=2, min_width=320, elem_id="prompt-panel"):
            gr.Markdown("### 1 · Rendered prompt")
            parts["prompt"] = gr.HTML(elem_id="rendered-prompt")
            gr.Markdown("### 2 · Placeholder expansion")
            parts["budget"] = gr.HTML(elem_id="budget")
            parts["runs"] = gr.Textbox(label="Token sequence (runs)", lines=4, max_lines=10, elem_id="runs")
            parts["table"] = gr.Dataframe(headers=TABLE_HEADERS, label="Images and videos", elem_id="image-table",
                                          interactive=False, wrap=True, column_widths=TABLE_WIDTHS)
            parts["gallery"] = gr.Gallery(label="What the processor did", preview=True, height=GALLERY_HEIGHT,
                                          object_fit="contain", elem_id="overlays")
        with gr.Column(scale=2, min_width=320, elem_id="chat-panel"):
            gr.Markdown("### 3 · Chat")
            parts["chat"] = gr.Chatbot(label="Chat", elem_id="chat", height=440)
            parts["box"] = gr.MultimodalTextbox(file_types=["image", *VIDEO_SUFFIXES, ".safetensors"],
                                                file_count="multiple", elem_id="question", label="Message",
                                                show_label=False,
                                                placeholder="Ask about the images or videos (upload, paste or drop "
                                                            "them here)")
            parts["urls"] = gr.Textbox(label="Image or video URLs (one a line; http(s) from allowed hosts, or data:)",
                                       visible=settings.url_fetch, lines=1, elem_id="image-urls")
            with gr.Row(elem_id="chat-buttons"):  # right under the message box: they stay put while text streams
                parts["stop_btn"] = gr.Button("Stop", variant="stop", elem_id="stop", interactive=False, min_width=60)
                parts["retry_btn"] = gr.Button("Retry", elem_id="retry", min_width=60)
                parts["undo_btn"] = gr.Button("Undo", elem_id="undo", min_width=60)
                parts["clear_btn"] = gr.Button("Clear", elem_id="clear", min_width=60)
            parts["stats"] = gr.Markdown(elem_id="stats")
            parts["stats_data"] = gr.JSON(visible=False, elem_id="stats-data")
            parts["boxes"] = gr.Dataframe(headers=BOX_HEADERS, label="Boxes and points (pixels of the picture)",
                                          elem_id="boxes", interactive=False)
    examples = [[{"text": q, "files": [str(ASSETS / f)]}] for f, q in EXAMPLES if (ASSETS / f).exists()]
    if (ASSETS / "shape-a.png").exists():
        examples.append([{"text": "What differs between the two pictures?",
                          "files": [str(ASSETS / "shape-a.png"), str(ASSETS / "shape-b.png")]}])
    if (ASSETS / EXAMPLE_CLIP).exists():
        examples.append([{"text": "Where does the square go, and which frame numbers do you see?",
                          "files": [str(ASSETS / EXAMPLE_CLIP)]}])
    if examples:
        gr.Examples(examples, [parts["box"]], label="Examples (made by this project)")
    with gr.Accordion("Export: replay this request against vllm serve", open=False, elem_id="export"):
        parts["export_curl"] = gr.Code(label="vllm serve + curl", language="shell", elem_id="export-curl")
        parts["export_json"] = gr.Code(label="request.json (OpenAI chat completions)", language="json",
                                       elem_id="export-json")
        parts["export_py"] = gr.Code(label="Python (openai)", language="python", elem_id="export-py")
    with gr.Accordion("Compare two settings", open=False, elem_id="compare"):
        with gr.Row():
            for side in ("a", "b"):
                with gr.Column():
                    parts[f"model_{side}"] = gr.Dropdown(choices=choices, value=default_model,
                                                         label=f"{side.upper()}: model", elem_id=f"model-{side}")
                    parts[f"controls_{side}"] = Controls.create(registry, settings, default_model, elem_prefix=f"{side}")
        parts["compare_btn"] = gr.Button("Compare (inspect both)", elem_id="compare-btn")
        with gr.Row():
            for side in ("a", "b"):
                with gr.Column():
                    parts[f"compare_{side}"] = gr.HTML(elem_id=f"compare-{side}")
                    parts[f"compare_{side}_gallery"] = gr.Gallery(preview=True, height=GALLERY_HEIGHT, object_fit="contain",
                                                                  label=f"{side.upper()}: what the processor did")
    return Page(**parts)


@dataclasses.dataclass
class _Render:
    """A session's render for an answer (the request as the engine got it), and its panels once drawn."""

    request: ChatRequest
    inspection: Inspection
    view: dict[str, Any] | None = None


@dataclasses.dataclass
class _Live:
    """A session's answer while it streams: the conversation as last shown, and whether Stop was pressed."""

    conversation: Conversation
    stopped: bool = False
    """Set by Stop: the stream ends (closing it aborts the engine request) and shows the answer as stopped."""
    stats: Stats = dataclasses.field(default_factory=Stats)
    """The answer's figures so far (what a Stop shows)."""
    tokens_flowing: bool = False
    """Whether answer text has begun to come (then events come often, and each one checks ``stopped``)."""
    wake: asyncio.Future[None] | None = None
    """Done when Stop is pressed: wakes a stream waiting for a slow event (the render, the engine's start)."""

    def shown(self, conversation: Conversation) -> Conversation:
        """Note ``conversation`` as the one being shown; returns it."""
        self.conversation = conversation
        return conversation

    def stop(self) -> None:
        """Stop pressed (from any thread)."""
        self.stopped = True
        wake = self.wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # (its loop closed: nothing waits)
                wake.get_loop().call_soon_threadsafe(lambda: wake.done() or wake.set_result(None))

    async def events(self, events: Any):
        """``events`` until they end or Stop is pressed. Until answer text comes (the render, an engine's start)
        a Stop wakes the wait at once; then each event checks it (they come every few milliseconds), which costs
        no task per token."""
        self.wake = asyncio.get_running_loop().create_future()
        while not self.stopped:
            if self.tokens_flowing:
                event = await anext(events, None)
            else:
                step = asyncio.ensure_future(anext(events, None))
                await asyncio.wait({step, self.wake}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():  # Stop: the service's stream is cancelled where it waits
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    return
                event = step.result()
            if event is None or self.stopped:
                return
            self.tokens_flowing = self.tokens_flowing or isinstance(event, Delta)
            yield event


class Handlers:
    """What the page's events do, each an async function over the chat service. Values come in by
    position (Gradio's way) and go out by name (``Page.values``)."""

    def __init__(self, service: ChatService, page: Page):
        self.service = service
        self.registry = service.registry
        self.settings = service.settings
        self.page = page
        self._live: dict[str, _Live] = {}
        """Each session's streaming answer (Stop waits for it to end, then marks what was shown)."""
        self._renders: OrderedDict[str, _Render] = OrderedDict()
        """Each session's last render for an answer, for its panels (``PAGE_RENDERS_KEPT`` sessions at most)."""
        self._serial = itertools.count(1)

    # -- requests

    def request(self, model: str, turns: Sequence[Turn], system: str, sampling: Sequence[Any],
                controls: Sequence[Any], control_set: Controls | None = None) -> ChatRequest:
        """The typed request for the page's values; ``InputError`` for a value of the wrong type."""
        spec = self.registry.get(model)
        mm_kwargs = (control_set or self.page.controls).mm_kwargs(model, controls)
        temperature, top_p, max_tokens, seed = sampling
        try:
            params = Sampling(temperature=float(temperature), top_p=float(top_p), max_tokens=int(max_tokens),
                              seed=int(seed) if seed not in (None, "", -1) else None,
                              # models.yaml's own; the page has no control for these
                              ignore_eos=spec.sampling.ignore_eos, regex=spec.sampling.regex,
                              printable_only=spec.sampling.printable_only)
        except (TypeError, ValueError) as exc:
            raise InputError(f"sampling settings: {str(exc).splitlines()[0]}") from None
        media_io = (control_set or self.page.controls).media_io(controls)
        return ChatRequest(model=model, turns=tuple(turns), system=system or "", mm_kwargs=mm_kwargs,
                           sampling=params, media_io=media_io)

    async def read_message(self, message: dict | None, url_text: str | None) -> tuple[Turn, tuple[Any, ...]]:
        """The message as a user turn (uploads first, then URLs), and as the chat shows it. Counts are checked
        before anything is decoded; decoding and checking run in a worker thread, off the event loop."""
        message = message if isinstance(message, dict) else {}
        text = message.get("text", "") or ""
        if not isinstance(text, str):
            raise InputError("the message text must be a string")
        files = [f if isinstance(f, str) else (f or {}).get("path", "") for f in message.get("files", []) or []]
        links = [line.strip() for line in (url_text or "").splitlines() if line.strip()]
        videos = sum(1 for f in files if is_video_name(f)) + sum(1 for link in links if is_video_url(link))
        for modality, n in (("image", len(files) + len(links) - videos), ("video", videos)):
            per_turn, _ = self.settings.media_limits(modality)
            if n > per_turn:
                raise InputError(f"{n} {modality}s in one message; the limit is {per_turn}")
        items = [await intake.load(path, self.settings, name=Path(path).name) for path in files]  # its name, not the server's folder
        # A clip shows as its first frame (a browser plays few of the codecs vLLM decodes), said in words
        pictures = [await asyncio.to_thread(image_file, item.poster, OVERLAYS)
                    if isinstance(item, Video) and item.poster is not None else path
                    for path, item in zip(files, items, strict=True)]
        clips = "".join(f"\n[video: {item.name}, {item.duration_s:.1f} s; its first frame shown]"
                        for item in items if isinstance(item, Video))
        items += [await intake.load(link, self.settings) for link in links]
        shown = text + clips + "".join(f"\n[{'video' if is_video_url(link) else 'image'}: {link[:80]}]"
                                       for link in links)
        return Turn("user", text, intake.by_modality(items)), (*pictures, shown)

    def rendered_view(self, request: ChatRequest, inspection: Inspection) -> dict[str, Any]:
        """The panels and exports of a rendered request (drawing and encoding pictures: run in a thread)."""
        images = [im for t in request.turns for im in t.media.get("image", ())]
        spec = self.registry.get(request.model)
        body = chat_completions_body(request, spec)
        return {**panels(self.service, inspection, images),
                "export_json": json.dumps(body, indent=1),
                "export_curl": serve_command(spec, self.service.engines.model_path(spec) if spec.tiny else None)
                + "\n\n" + curl_command(spec),
                "export_py": python_snippet(body, spec)}

    async def answer(self, before: Conversation, exchange: Exchange, request: ChatRequest, clear_box: bool,
                     session: str | None = None, marks: dict[str, float] | None = None):
        """Stream the answer to ``exchange`` after ``before``; yields page updates, grouped by time (the first at
        once), each with the conversation as shown so far, so a stopped answer stays as it was shown.

        A request refused before it reached the engine changes nothing. Each streamed update repeats the panels'
        values rather than leaving them out: Gradio turns an output left out of a dict into a property update,
        and rebuilds that component's configuration (its JSON schema included) on every update, which cost more
        than the rest of the update together; repeated values reach the browser as an empty diff. The message
        box is left out after the first update (it may hold the user's next question). ``marks`` gathers the
        wall-clock times of the steps to the first answer text (the final ``stats_data`` carries them)."""
        conversation = before.ask(exchange)
        live = _Live(conversation)
        if session:
            self._live[session] = live
        try:
            async for update in self._answer(conversation, request, clear_box, live,
                                           marks if marks is not None else {}, session or ""):
                yield update
        finally:  # ended, failed or cancelled (Stop, a closed tab)
            if session and self._live.get(session) is live:
                del self._live[session]

    async def _answer(self, conversation: Conversation, request: ChatRequest, clear_box: bool, live: _Live,
                      marks: dict[str, float], session: str):
        page = self.page
        shown: dict[str, Any] = {}
        last = 0.0
        boxes: Boxes | None = None
        async with contextlib.aclosing(self.service.chat(request, preview=True)) as events:
            async for event in live.events(events):
                if isinstance(event, Failed):
                    if not shown:
                        raise user_error(event.message)
                    conversation = conversation.with_last(status="failed", note=event.message)
                    yield page.values(**shown | {"chat": chat_messages(conversation), "stats": "", "stop_btn": STOP_OFF,
                                                 "stats_data": stats_data(None, "failed")}) | {page.state: live.shown(conversation)}
                    raise user_error(event.message)
                if isinstance(event, Rendered):
                    marks["rendered"] = time.time()
                    sent = dataclasses.replace(request, sampling=event.sampling or request.sampling)  # as the engine got it
                    rendered = self._keep_render(session, _Render(sent, event.inspection))
                    shown = {"stats": "generating…", "stats_data": stats_data(None, "streaming"), "boxes": [],
                             "stop_btn": STOP_ON}  # Stop can be pressed while the answer runs, and only then
                    boxes = Boxes.of(self.registry.get(request.model), request, event.inspection)
                    marks["panels"] = time.time()  # handed to the panels' own event (drawn there, in parallel)
                    yield page.values(**shown, chat=chat_messages(conversation)) | {
                        page.state: live.shown(conversation), page.rendered: (rendered, clear_box)}
                elif isinstance(event, Waiting):
                    live.stats = Stats(wait_s=event.waited_s)
                    yield page.values(**shown | {"stats": waiting_text(event), "stats_data": stats_data(
                        live.stats, "waiting"), "chat": chat_messages(conversation)}) | {page.state: live.shown(conversation)}
                elif isinstance(event, Delta):
                    conversation = conversation.with_last(answer=event.answer, reasoning=event.reasoning)
                    live.stats = Stats(tokens=event.num_tokens, ttft_s=event.ttft_s, tokens_per_s=event.tokens_per_s,
                                       wait_s=event.wait_s)
                    now = time.perf_counter()
                    if now - last >= self.settings.ui_update_interval_s:
                        last = now
                        conversation, shown = await _with_boxes(boxes, conversation, shown)
                        marks.setdefault("first_text", time.time())
                        yield page.values(**shown | {"stats": "generating…"}, chat=chat_messages(conversation)) | {
                            page.state: live.shown(conversation)}
                elif isinstance(event, Done):
                    stats = stats_of(event)
                    conversation = conversation.with_last(answer=event.answer, status="done", stats=stats,
                                                          reasoning=event.reasoning)
                    conversation, shown = await _with_boxes(boxes, conversation, shown)
                    yield page.values(**shown | {"chat": chat_messages(conversation), "stats": stats_text(stats),
                                                 "stats_data": stats_data(stats, "done", marks), "stop_btn": STOP_OFF}
                                      ) | {page.state: live.shown(conversation)}
        if live.stopped:  # the answer as far as it was shown, marked (the stream's last update: Gradio repeats it)
            stopped = live.conversation.settled().with_last(stats=live.stats)
            yield page.values(**shown | {"chat": chat_messages(stopped), "stats": stats_text(live.stats, True),
                                         "stats_data": stats_data(live.stats, "stopped"), "stop_btn": STOP_OFF}
                              ) | {page.state: stopped}

    def _keep_render(self, session: str, render: _Render) -> int:
        """Keep ``render`` as ``session``'s last; returns its serial number."""
        self._renders[session] = render
        self._renders.move_to_end(session)
        while len(self._renders) > PAGE_RENDERS_KEPT:
            self._renders.popitem(last=False)
        return next(self._serial)

    # -- events

    async def panels(self, request: gr.Request, rendered: Any) -> dict[Any, Any]:
        """The panels and Export of the render the session's last answer was generated from (the ``/panels``
        API; on the page, shown as soon as that answer's render is there)."""
        render = self._renders.get(getattr(request, "session_hash", None) or "")
        if render is None:
            return self.page.values(prompt="", runs="", table=[], gallery=[], budget="", export_json="",
                                    export_curl="", export_py="")
        if render.view is None:  # drawn once, in a worker thread
            render.view = await asyncio.to_thread(self.rendered_view, render.request, render.inspection)
        return self.page.values(**{name: render.view[name] for name in RENDER_OUTPUTS})

    async def submit(self, request: gr.Request, message, conversation, model, system, temperature, top_p,
                     max_tokens, seed, *rest):
        """Ask the message (the ``/chat`` API)."""
        *controls, url_text, detect = rest
        marks = {"handler": time.time()}
        try:
            user, shown = await self.read_message(message, url_text)
            marks["read"] = time.time()
            before = _conversation(conversation).settled()
            chat_request = self.request(model, (*before.turns(), user), system,
                                        (temperature, top_p, max_tokens, seed), controls)
            if (detect or "").strip():  # Detect mode: the family's own question, its answer held to its grammar
                typed = user.text
                chat_request = detect_request(chat_request, self.registry.get(model), detect)
                user = chat_request.turns[-1]
                shown = (*shown[:-1], user.text + shown[-1][len(typed):])  # as the model gets it (URL lines kept)
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        async for update in self.answer(before, Exchange(user, shown), chat_request, clear_box=True,
                                        session=request.session_hash, marks=marks):
            yield update

    async def retry(self, request: gr.Request, conversation, model, system, temperature, top_p, max_tokens, seed,
                    *rest):
        """Answer the last message again, whatever became of its answer (the ``/retry`` API); with Detect on,
        held to the family's box grammar again."""
        *controls, detect = rest
        marks = {"handler": time.time()}
        marks["read"] = marks["handler"]  # nothing to read: the message is the conversation's own
        try:
            before, exchange = _conversation(conversation).retry()
        except ValueError:
            raise user_error("nothing to retry yet") from None
        try:
            chat_request = self.request(model, (*before.turns(), exchange.user), system,
                                        (temperature, top_p, max_tokens, seed), controls)
            if (detect or "").strip():  # the same question, its answer held to the family's grammar
                chat_request = dataclasses.replace(chat_request, detect=detect.strip())
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        async for update in self.answer(before, exchange, chat_request, clear_box=False,
                                        session=request.session_hash, marks=marks):
            yield update

    def stop(self, request: gr.Request) -> Any:
        """Stop the session's answer (the ``/stop`` API): its stream ends at once, aborts the engine request and
        shows the answer as far as it went, marked stopped, as its own last update (nothing later undoes it)."""
        live = self._live.get(getattr(request, "session_hash", None) or "")
        if live is not None:  # (none: the answer had ended, and Stop changes nothing)
            live.stop()
        return STOP_OFF

    def undo(self, request: gr.Request, conversation) -> dict[Any, Any]:
        """Remove the last exchange (the ``/undo`` API); Export, which replayed its request, empties (the page
        then shows vLLM's render of what is left: ``follow``)."""
        self._renders.pop(getattr(request, "session_hash", None) or "", None)
        conversation = _conversation(conversation).undo()
        return self.page.values(chat=chat_messages(conversation), export_json="", export_curl="", export_py="") | {
            self.page.state: conversation}

    def clear(self, request: gr.Request) -> dict[Any, Any]:
        """Start a new conversation (the ``/clear`` API)."""
        self._renders.pop(getattr(request, "session_hash", None) or "", None)
        return self.page.values(chat=[], prompt="", runs="", table=[], gallery=[], budget="", stats="", boxes=[],
                                export_json="", export_curl="", export_py="") | {self.page.state: Conversation()}

    async def to_inspect(self, message, conversation, url_text) -> tuple[Turn, ...]:
        """The turns to inspect: the conversation with the typed message, or else up to its last question."""
        conversation = _conversation(conversation).settled()
        user, _ = await self.read_message(message, url_text)
        if user.text or user.media:
            return (*conversation.turns(), user)
        if conversation.exchanges:
            before, exchange = conversation.retry()
            return (*before.turns(), exchange.user)
        return ()

    async def inspect(self, message, conversation, model, system, *rest, quiet: bool = False) -> dict[Any, Any]:
        """Render and expand without generating (the ``/inspect`` API; the controls call it as they move).
        ``quiet`` (``follow``): nothing to render empties the panels, and a refusal is raised as it is."""
        *controls, url_text = rest
        try:
            turns = await self.to_inspect(message, conversation, url_text)
            if not turns:
                if quiet:
                    return self.page.values(prompt="", runs="", table=[], gallery=[], budget="")
                return self.page.values(stats="add an image or a question to inspect")
            request = self.request(model, turns, system, (0.0, 1.0, 1, None), controls)
            inspection = await self.service.inspect(request, start_engine=False)  # not waiting for an engine start
        except VlmDemoError as exc:
            if quiet:
                raise
            raise user_error(str(exc)) from None
        images = [im for t in request.turns for im in t.media.get("image", ())]
        view = await asyncio.to_thread(panels, self.service, inspection, images)
        return self.page.values(**view)

    async def compare(self, message, conversation, url_text, model_a, *rest) -> list[Any]:
        """Inspect the same conversation under two models or settings (the ``/compare`` API)."""
        n = len(self.page.controls_a.kwargs)
        controls_a, (model_b, *controls_b) = rest[:n], rest[n:]
        outputs: list[Any] = []
        try:
            turns = await self.to_inspect(message, conversation, url_text)
            if not turns:
                raise InputError("add an image and a question first")
            for model, values, control_set in ((model_a, controls_a, self.page.controls_a),
                                               (model_b, controls_b, self.page.controls_b)):
                request = self.request(model, turns, "", (0.0, 1.0, 1, None), values, control_set)
                inspection = await self.service.inspect(request, start_engine=False)
                images = [im for t in turns for im in t.media.get("image", ())]
                view = await asyncio.to_thread(panels, self.service, inspection, images)
                outputs += [view["budget"] + view["prompt"], view["gallery"]]
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        return outputs

    async def load_model(self, name: str) -> str:
        """Start (or switch to) the model's engine (the ``/load_model`` API); the page's status line follows the
        start through ``tick``."""
        try:
            await self.service.engines.get(self.registry.get(name))
        except VlmDemoError as exc:
            raise user_error(str(exc)) from None
        return _state_text(self.service, name)

    def state_text(self, name: str) -> str:
        return _state_text(self.service, name)

    def tick(self, name: str) -> dict[Any, Any]:
        """The status line now (every ``STATUS_EVERY_S``: each second while the engine starts, else a few: another
        tab's switch may stop this model's engine)."""
        starting = self.service.engines.progress(name) is not None
        return {self.page.engine_state: _state_text(self.service, name),
                self.page.timer: gr.Timer(STATUS_EVERY_S[0] if starting else STATUS_EVERY_S[1])}

    def switch_outputs(self) -> list[Any]:
        """What a model switch updates (``switch``'s outputs)."""
        page = self.page
        return [*page.controls.components, *page.sampling[:3], page.detect, page.model_a, page.model_b,
                page.engine_state, page.timer]

    async def switch(self, name: str) -> dict[Any, Any]:
        """The page as the model picker moved to ``name``: its controls (property updates of the components built
        with the page), its sampling defaults, Detect where its family has a box format, Compare's pickers on it,
        and its engine's status, starting at once: the start begins here (``load_model`` then waits for it and
        says how it ended), so no status tick in between finds it not loaded."""
        page, spec = self.page, self.registry.get(name)
        if not spec.remote and self.service.engines.running(spec) is None:
            started = asyncio.ensure_future(self.service.engines.get(spec))
            started.add_done_callback(lambda t: t.cancelled() or t.exception())  # (load_model reports a failure)
            await asyncio.sleep(0)  # the start takes its first step: its progress is there
        return {**dict(zip(page.controls.components, page.controls.updates(name), strict=True)),
                page.temperature: spec.sampling.temperature, page.top_p: spec.sampling.top_p,
                page.max_tokens: spec.sampling.max_tokens, page.detect: gr.update(visible=has_grounding(spec)),
                page.model_a: name, page.model_b: name,
                page.engine_state: _state_text(self.service, name, starting=True),
                page.timer: gr.Timer(STATUS_EVERY_S[0])}

    async def follow(self, message, conversation, model, system, *rest) -> dict[Any, Any]:
        """The panels after a switch or an Undo: vLLM's render (without an engine, where it is not running) of
        the conversation and the typed message, as Inspect only shows it; empty when there is nothing to render,
        and a refusal (a video for a model without video) said in the prompt panel, not as an error."""
        empty = self.page.values(prompt="", runs="", table=[], gallery=[], budget="")
        try:
            return await self.inspect(message, conversation, model, system, *rest, quiet=True)
        except VlmDemoError as exc:
            return empty | self.page.values(prompt=f'<p class="render-note">{html.escape(str(exc))}</p>')

def _conversation(value: Any) -> Conversation:
    """The session's conversation (a new session's state may still be Gradio's empty default)."""
    return value if isinstance(value, Conversation) else Conversation()


def wire(page: Page, on: Handlers) -> None:
    """Connect the page's events to the handlers; each API endpoint is named."""
    controls = page.controls.components
    sampling = page.sampling
    chat_outputs = [*page.out(CHAT_OUTPUTS), page.stop_btn, page.state, page.rendered]  # (a button: not in the API)
    chat_event = page.box.submit(on.submit, [page.box, page.state, page.model, page.system, *sampling, *controls,
                                             page.urls, page.detect], chat_outputs, api_name="chat")
    chat_event.success(lambda: "", None, page.urls, api_name=False)  # the URLs went with the question
    page.retry_btn.click(on.retry, [page.state, page.model, page.system, *sampling, *controls, page.detect],
                         chat_outputs, api_name="retry")
    # An answer's render: its panels in their own event (not repeated in every streamed update), the box cleared
    page.rendered.change(on.panels, page.rendered, page.out(RENDER_OUTPUTS), api_name="panels",
                         concurrency_limit=None, show_progress_on=[page.prompt])  # never behind the answers
    page.rendered.change(lambda rendered: None if rendered[1] else gr.skip(), page.rendered, page.box,
                         api_name=False, queue=False)
    # Stop ends the answer's stream, which shows the answer as stopped itself (Gradio's cancellation of the event
    # would leave its outputs marked "Error" on the page)
    page.stop_btn.click(on.stop, None, page.stop_btn, api_name="stop", queue=False)
    inspect_inputs = [page.box, page.state, page.model, page.system, *controls, page.urls]
    inspect_outputs = page.out(INSPECT_OUTPUTS)
    # Progress shows on one light component: the browser re-reads every component that ever showed an event's
    # progress at every later event (Gradio 6.31), and Export's boxes hold megabytes (pictures as data URLs)
    quiet = dict(show_progress_on=[page.prompt])
    # The panels follow the conversation: after Undo, vLLM's render of what is left (Export: nothing sent yet)
    page.undo_btn.click(on.undo, page.state, [page.chat, page.state, *page.out(EXPORT_OUTPUTS)], api_name="undo",
                        show_progress_on=[page.chat]).then(on.follow, inspect_inputs, inspect_outputs, api_name=False,
                                                           **quiet)
    page.clear_btn.click(on.clear, None, [*page.out(API_OUTPUTS["clear"]), page.state], api_name="clear",
                         show_progress_on=[page.chat])
    page.inspect_btn.click(on.inspect, inspect_inputs, inspect_outputs, api_name="inspect", **quiet)
    for control in controls:  # a slider on release (Enter in its number box too), a checkbox on each click
        moved = control.input if isinstance(control, gr.Checkbox) else control.release
        moved(on.inspect, inspect_inputs, inspect_outputs, api_name=False, trigger_mode="always_last", **quiet)
    # A switch: the new model's controls, sampling, Detect, Compare's pickers and "starting" at once (property
    # updates only), its engine's start (the status follows it), and the panels from vLLM's renderer meanwhile
    switched = page.model.change(on.switch, page.model, on.switch_outputs(), api_name=False, queue=False,
                                 show_progress="hidden")
    switched.then(on.load_model, page.model, page.engine_state, api_name="load_model", show_progress="hidden")
    switched.then(on.follow, inspect_inputs, inspect_outputs, api_name=False, **quiet)
    page.timer.tick(on.tick, page.model, [page.engine_state, page.timer], api_name=False, queue=False,
                    show_progress="hidden")
    for picker, side in ((page.model_a, page.controls_a), (page.model_b, page.controls_b)):
        picker.change(side.updates, picker, side.components, api_name=False, queue=False, show_progress="hidden")
    page.compare_btn.click(on.compare, [page.box, page.state, page.urls, page.model_a, *page.controls_a.components,
                                        page.model_b, *page.controls_b.components],
                           page.out(COMPARE_OUTPUTS), api_name="compare")


def build_app(service: ChatService, default_model: str) -> gr.Blocks:
    """The page: its layout, its handlers and the events between them."""
    service.derive_controls()  # models whose entries offer no controls get their processors' (once, before the page)
    with gr.Blocks(title="vlm-demo") as demo:
        page = layout(service, default_model)
        handlers = Handlers(service, page)
        wire(page, handlers)
        demo.load(handlers.state_text, page.model, page.engine_state, api_name=False, queue=False)
    demo.queue(default_concurrency_limit=service.settings.queue_concurrency, max_size=service.settings.queue_max_size)
    return demo


STOP_ON, STOP_OFF = gr.update(interactive=True), gr.update(interactive=False)
"""Stop while an answer runs, and not otherwise."""

PAGE_JS = """() => {
  // A slider's number box: Enter takes the typed value, as leaving the box does (Gradio's slider reports a
  // typed value only when the box loses focus)
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (e.key === 'Enter' && t instanceof HTMLInputElement && t.type === 'number') t.blur();
  });
  // A file input forgets its files once they are taken, so the same file picked again (the picture of the last
  // question) is a new pick: an input whose files did not change reports nothing, and the file was lost
  document.addEventListener('change', (e) => {
    const t = e.target;
    if (t instanceof HTMLInputElement && t.type === 'file') setTimeout(() => { t.value = ''; }, 0);
  }, true);
}"""
"""The page's own script, run once it has loaded."""


def launch_kwargs(settings: Settings | None = None) -> dict[str, Any]:
    """Arguments for ``Blocks.launch`` shared by the app and the tests: only the project's own
    pictures are served from disk besides uploads, and Gradio refuses uploads over the size limit."""
    settings = settings or Settings.from_env()
    return {"css": CSS, "js": PAGE_JS, "allowed_paths": [str(ASSETS)], "max_file_size": settings.max_upload_bytes}

