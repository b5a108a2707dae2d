"""The page's components, placed and named: model bar; settings | prompt and expansion panels | chat; examples,
Export and Compare below (``layout``), gathered in ``Page``; and their style (``CSS``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from ..conversation import Conversation
from ..inspector import PROMPT_CSS
from ..intake import AUDIO_SUFFIXES, DOCUMENT_SUFFIXES, VIDEO_SUFFIXES
from ..service import ChatService
from ..settings import STATUS_EVERY_S
from .contract import has_grounding, max_tokens_limit, reader_tasks
from .controls import Controls
from .panels import BOX_HEADERS, TABLE_HEADERS, TABLE_WIDTHS
from .status import picker_choices, state_text

STOP_LABEL = "Stop"
"""The Stop button's label (its value: what each streamed update after the first sends it)."""

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
"""The project's own pictures and clip (the examples; served from disk besides uploads)."""
LATEX_DELIMITERS = [{"left": "$$", "right": "$$", "display": True}, {"left": "\\[", "right": "\\]", "display": True},
                    {"left": "\\(", "right": "\\)", "display": False}]
"""The formula delimiters the chat renders (KaTeX): the readers' LaTeX (dots.ocr, DeepSeek-OCR, GLM-OCR)."""
CSS = """
.prompt { white-space: pre-wrap; overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: 12px;
          max-height: 420px; overflow: auto; margin: 0; }
mark.ph, mark.ph * { background: #ffd54f; color: #000; } mark.sp, mark.sp * { background: #cfd8dc; color: #000; }
.page-prompt > summary { cursor: pointer; font-weight: 600; padding: 2px 0; }  /* page by page: one page's prompt */
/* the tables' numbers stay whole: Gradio's cells break a word anywhere it does not fit its column, and a phone showed
   "640x4 / 80", "49 5", a desktop "position / s"; the numbers' columns break between words only, the columns are wide
   enough for them (TABLE_WIDTHS), and the cell menu (sorting a non-editable table) gives its room to the header.
   (No comma inside :is() here: Gradio prefixes each part of a selector list, and the rule's weight changes.) */
#image-table [role=gridcell] span, #image-table th span, #boxes [role=gridcell] span, #boxes th span {
  word-break: keep-all !important; overflow-wrap: normal !important; hyphens: none; }
#image-table [role=gridcell]:nth-child(-n+2) span { overflow-wrap: anywhere !important; }  /* a name, a token */
#image-table .cell-menu-button, #boxes .cell-menu-button { display: none !important; }
@media (max-width: 720px) {  /* a phone: the model's name whole, its status under it, and the chat right after */
  #model-row { flex-direction: column; align-items: stretch; }
  #model-row > * { width: 100%; max-width: 100%; }
  #chat-panel { order: -1; }
  #chat { height: 300px !important; max-height: 300px !important; }  /* the message box on the first screen */
  #engine-state .also-running { display: block; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  #intro p { display: none; }  /* the title alone: the model, its status and the chat come first */
}
#engine-state .also-running { font-size: 12px; }
.budget { display: flex; height: 18px; border-radius: 4px; overflow: hidden; background: #e8f5e9; }
.audit { border-left: 4px solid #9e9e9e; padding: 2px 8px; margin: 0 0 6px; }  /* an endpoint model's render audit */
.audit-equal { border-left-color: #2e7d32; } .audit-differs { border-left-color: #c62828; }
.audit pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12px; margin: 4px 0; }
.budget .image { background: #ff7043; } .budget .video { background: #ab47bc; } .budget .audio { background: #26a69a; } .budget .txt { background: #42a5f5; }
""" + PROMPT_CSS
HEAD = """<style>
/* The tables' type: each number stays whole in its column (TABLE_WIDTHS), in smaller type where the table is narrow
   (a phone, a narrow window, whatever the page's width). A container query, which Gradio's own CSS handling drops:
   in the page's head. */
#image-table [role=gridcell] span, #image-table th span, #boxes [role=gridcell] span, #boxes th span {
  font-size: 13px !important; }
#image-table .cell-wrap, #boxes .cell-wrap { padding: 6px 5px !important; }
#image-table, #boxes { container-type: inline-size; }
@container (max-width: 440px) {
  #image-table [role=gridcell] span, #image-table th span, #boxes [role=gridcell] span, #boxes th span {
    font-size: 11px !important; }
  #image-table .cell-wrap, #boxes .cell-wrap { padding: 4px 2px !important; }
}
</style>"""
"""What the page's head adds: the style Gradio's ``css`` cannot carry."""
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



@dataclasses.dataclass(frozen=True)
class Page:
    """The page's components by name (see ``layout``)."""

    model: Any
    """The model picker."""
    current: Any
    """The session's model as last switched to (Gradio state: a pick that cannot start goes back to it)."""
    engine_state: Any
    """The status line beside it: where the model's engine stands, and the other engines running."""
    model_note: Any
    """Under the model row: why a model picked cannot start here (stays until the next switch)."""
    conversation: Any
    """The session's conversation (Gradio state: no API input)."""
    rendered: Any
    """The session's last render for an answer, as ``(serial, box)``: its change shows the panels, and ``box`` True
    empties the message box (the engine has the question), a message value puts the question back (only the engine
    could refuse it), False leaves the box."""
    attached: Any
    """The files in the message box, checked and kept, one path a line (a hidden textbox: a State's change follows
    queued events only, and the box's check is not queued): its change renders the panels (a keystroke changes the
    box, not this)."""
    system: Any
    """The system prompt."""
    controls: Controls
    """The model's processor controls and video sliders."""
    temperature: Any
    """Sampling: temperature."""
    top_p: Any
    """Sampling: top_p."""
    max_tokens: Any
    """Sampling: max_tokens."""
    seed: Any
    """Sampling: the seed (-1: random)."""
    inspect_btn: Any
    """Inspect only."""
    prompt: Any
    """Panel 1: the rendered prompt (with the content format and the settings sent)."""
    budget: Any
    """Panel 2: the token budget bar."""
    runs: Any
    """Panel 2: the token sequence as runs."""
    table: Any
    """Panel 2: one row per picture or clip."""
    gallery: Any
    """Panel 2: what the processor did, one picture at a time."""
    chat: Any
    """Panel 3: the chat."""
    message: Any
    """The message box (text and files)."""
    message_note: Any
    """Beside the message box: the attachments refused, and why (stays until the message is sent)."""
    urls: Any
    """Image or video URLs, one a line (shown where URL fetching is on)."""
    stats: Any
    """The stats line under the chat."""
    stats_data: Any
    """The answer's figures as data (hidden; for the API)."""
    detect: Any
    """Detect: what to find (shown where the family has a box format)."""
    task: Any
    """A document reader's task picker (its checkpoint's documented prompts; shown where the family has them):
    picking one fills the message box's text with the task's prompt, editable."""
    boxes: Any
    """The answer's boxes and points as a table."""
    stop_btn: Any
    """Stop (interactive while an answer runs)."""
    retry_btn: Any
    """Retry."""
    undo_btn: Any
    """Undo."""
    clear_btn: Any
    """Clear."""
    export: Any
    """Export's panel (closed at first: its boxes are built as it opens)."""
    export_json: Any
    """Export: the request as OpenAI chat-completions JSON."""
    export_curl: Any
    """Export: the ``vllm serve`` command and a curl command."""
    export_py: Any
    """Export: a Python ``openai`` snippet."""
    model_a: Any
    """Compare: side A's model picker."""
    controls_a: Controls
    """Compare: side A's controls."""
    model_b: Any
    """Compare: side B's model picker."""
    controls_b: Controls
    """Compare: side B's controls."""
    compare_btn: Any
    """Compare (inspect both)."""
    compare_a: Any
    """Compare: side A's budget and prompt."""
    compare_a_gallery: Any
    """Compare: side A's pictures."""
    compare_b: Any
    """Compare: side B's budget and prompt."""
    compare_b_gallery: Any
    """Compare: side B's pictures."""
    timer: Any
    """Asks for the status line every ``STATUS_EVERY_S`` (each second while the engine starts)."""

    def out(self, names: Sequence[str]) -> list[Any]:
        """Components by name."""
        return [getattr(self, n) for n in names]

    def values(self, **values: Any) -> dict[Any, Any]:
        """An update keyed by component, from values keyed by name."""
        return {getattr(self, name): value for name, value in values.items()}

    def inputs(self, names: Sequence[str]) -> dict[str, Any]:
        """Components by input name (the contract's ``endpoint_inputs``): a control's by its input name, the rest
        by attribute."""
        controls = {name: component for side in (self.controls, self.controls_a, self.controls_b)
                    for name, component in zip(side.names, side.components, strict=True)}
        return {name: controls[name] if name in controls else getattr(self, name) for name in names}



def layout(service: ChatService, default_model: str) -> Page:
    """The components, placed: model bar; settings | prompt and expansion panels | chat; examples,
    export and compare below. Call inside ``gr.Blocks``."""
    choices = picker_choices(service)
    gr.Markdown("# vlm-demo\nChat with a vision-language model served by vLLM and see exactly what the "
                "engine receives: the rendered prompt, each image's tokens, and the streamed answer.", elem_id="intro")
    parts: dict[str, Any] = {"conversation": gr.State(Conversation()), "rendered": gr.State((0, False)),
                             "current": gr.State(default_model)}
    with gr.Row(elem_id="model-row"):
        parts["model"] = gr.Dropdown(choices=choices, value=default_model, label="Model", scale=2, min_width=260,
                                     elem_id="model")
        parts["engine_state"] = gr.Markdown(state_text(service, default_model), elem_id="engine-state",
                                            min_width=260)
    parts["model_note"] = gr.Markdown(elem_id="model-note")
    parts["timer"] = gr.Timer(STATUS_EVERY_S[1])
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=260, elem_id="settings-panel"):
            parts |= _settings(service, default_model)
        with gr.Column(scale=2, min_width=320, elem_id="prompt-panel"):
            parts |= _expansion_panels()
        with gr.Column(scale=2, min_width=320, elem_id="chat-panel"):
            parts |= _chat_panel(service)
    _examples(parts["message"])
    with gr.Accordion("Export: replay this request against vllm serve", open=False, elem_id="export") as export:
        parts["export"] = export
        parts["export_curl"] = gr.Code(label="vllm serve + curl", language="shell", elem_id="export-curl")
        parts["export_json"] = gr.Code(label="request.json (OpenAI chat completions)", language="json",
                                       elem_id="export-json")
        parts["export_py"] = gr.Code(label="Python (openai)", language="python", elem_id="export-py")
    with gr.Accordion("Compare two settings", open=False, elem_id="compare"):
        parts |= _compare(service, default_model, choices)
    return Page(**parts)


def _settings(service: ChatService, default_model: str) -> dict[str, Any]:
    """The settings column: system prompt, the model's controls, sampling, Detect and Inspect only."""
    found = service.profile(default_model)
    spec = found.spec
    parts: dict[str, Any] = {}
    parts["system"] = gr.Textbox(label="System prompt", placeholder="(the chat template's default)", lines=2)
    parts["controls"] = Controls.create(service.profiles, service.settings, default_model)
    with gr.Accordion("Sampling", open=False, elem_id="sampling"):
        parts["temperature"] = gr.Slider(0, 2, value=spec.sampling.temperature, step=0.05, label="temperature")
        parts["top_p"] = gr.Slider(0.05, 1, value=spec.sampling.top_p, step=0.05, label="top_p")
        parts["max_tokens"] = gr.Slider(1, max_tokens_limit(spec), value=spec.sampling.max_tokens, step=1,
                                        label="max_tokens", elem_id="max-tokens")
        parts["seed"] = gr.Number(value=-1, precision=0, label="seed (-1: random)", elem_id="seed")
    parts["detect"] = gr.Textbox(label="Detect: what to find (the answer is held to the model's own box format)",
                                 placeholder="e.g. the red square", lines=1, elem_id="detect",
                                 visible=has_grounding(found))
    tasks = reader_tasks(found)
    parts["task"] = gr.Dropdown(choices=tasks, value=None, label="Task (the reader's own prompt, into the message box)",
                                elem_id="task", visible=bool(tasks), interactive=True)
    parts["inspect_btn"] = gr.Button("Inspect only", elem_id="inspect")
    return parts


def _expansion_panels() -> dict[str, Any]:
    """Panels 1 and 2: the rendered prompt, and the placeholder expansion (budget, runs, table, pictures)."""
    parts: dict[str, Any] = {}
    gr.Markdown("### 1 · Rendered prompt")
    parts["prompt"] = gr.HTML(elem_id="rendered-prompt")
    gr.Markdown("### 2 · Placeholder expansion")
    parts["budget"] = gr.HTML(elem_id="budget")
    parts["runs"] = gr.Textbox(label="Token sequence (runs)", lines=4, max_lines=10, elem_id="runs")
    parts["table"] = gr.Dataframe(headers=TABLE_HEADERS, label="Images, videos and clips", elem_id="image-table",
                                  interactive=False, wrap=True, column_widths=TABLE_WIDTHS)
    parts["gallery"] = gr.Gallery(label="What the processor did", preview=True, height=GALLERY_HEIGHT,
                                  object_fit="contain", elem_id="overlays")
    return parts


def _chat_panel(service: ChatService) -> dict[str, Any]:
    """Panel 3: the chat, the message box and URLs, the buttons right under them, the stats and the boxes."""
    parts: dict[str, Any] = {}
    gr.Markdown("### 3 · Chat")
    # Answers as documents: Markdown, HTML tables (sanitised), LaTeX in the delimiters readers write (not a lone "$":
    # prices); each answer's raw text one click away (its copy button)
    parts["chat"] = gr.Chatbot(label="Chat", elem_id="chat", height=440, latex_delimiters=LATEX_DELIMITERS)
    parts["message"] = gr.MultimodalTextbox(file_types=["image", *VIDEO_SUFFIXES, *AUDIO_SUFFIXES, *DOCUMENT_SUFFIXES,
                                                    ".safetensors"],
                                        file_count="multiple", elem_id="question", label="Message",
                                        show_label=False, sources=["upload", "microphone"],
                                        placeholder="Ask about images, videos, PDF documents or sound (upload, "
                                                    "paste or drop them here, or record)")
    parts["message_note"] = gr.Markdown(elem_id="message-note")
    parts["attached"] = gr.Textbox(visible="hidden", elem_id="attached", container=False)
    parts["urls"] = gr.Textbox(label="Image or video URLs (one a line; http(s) from allowed hosts, or data:)",
                               visible=service.settings.url_fetch, lines=1, elem_id="image-urls")
    with gr.Row(elem_id="chat-buttons"):  # right under the message box: they stay put while text streams
        parts["stop_btn"] = gr.Button(STOP_LABEL, variant="stop", elem_id="stop", interactive=False, min_width=60)
        parts["retry_btn"] = gr.Button("Retry", elem_id="retry", min_width=60)
        parts["undo_btn"] = gr.Button("Undo", elem_id="undo", min_width=60)
        parts["clear_btn"] = gr.Button("Clear", elem_id="clear", min_width=60)
    parts["stats"] = gr.Markdown(elem_id="stats")
    parts["stats_data"] = gr.JSON(visible=False, elem_id="stats-data")
    parts["boxes"] = gr.Dataframe(headers=BOX_HEADERS, label="Boxes and points (pixels of the picture)",
                                  elem_id="boxes", interactive=False)
    return parts


def _examples(box: Any) -> None:
    """The examples (the project's own pictures and clip, where present) for the message ``box``."""
    examples = [[{"text": q, "files": [str(ASSETS / f)]}] for f, q in EXAMPLES if (ASSETS / f).exists()]
    if (ASSETS / "shape-a.png").exists():
        examples.append([{"text": "What differs between the two pictures?",
                          "files": [str(ASSETS / "shape-a.png"), str(ASSETS / "shape-b.png")]}])
    if (ASSETS / EXAMPLE_CLIP).exists():
        examples.append([{"text": "Where does the square go, and which frame numbers do you see?",
                          "files": [str(ASSETS / EXAMPLE_CLIP)]}])
    if examples:
        gr.Examples(examples, [box], label="Examples (made by this project)")


def _compare(service: ChatService, default_model: str, choices: list[tuple[str, str]]) -> dict[str, Any]:
    """Compare: a model picker and its controls for each side, the button, and each side's render."""
    parts: dict[str, Any] = {}
    with gr.Row():
        for side in ("a", "b"):
            with gr.Column():
                parts[f"model_{side}"] = gr.Dropdown(choices=choices, value=default_model,
                                                     label=f"{side.upper()}: model", elem_id=f"model-{side}")
                parts[f"controls_{side}"] = Controls.create(service.profiles, service.settings, default_model, side)
    parts["compare_btn"] = gr.Button("Compare (inspect both)", elem_id="compare-btn")
    with gr.Row():
        for side in ("a", "b"):
            with gr.Column():
                parts[f"compare_{side}"] = gr.HTML(elem_id=f"compare-{side}")
                parts[f"compare_{side}_gallery"] = gr.Gallery(preview=True, height=GALLERY_HEIGHT, object_fit="contain",
                                                              label=f"{side.upper()}: what the processor did")
    return parts
