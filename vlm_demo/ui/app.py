"""The app: the page built (layout, handlers and the events between them, each API endpoint named) and the
arguments it is launched with. The only module that knows which event calls which handler."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..service import ChatService
from ..settings import Settings
from .contract import (API_OUTPUTS, CHAT_OUTPUTS, COMPARE_OUTPUTS, EXPORT_OUTPUTS, INSPECT_OUTPUTS, RENDER_OUTPUTS,
                       endpoint_inputs)
from .handlers import Handlers
from .layout import ASSETS, CSS, HEAD, Page, layout
from .server import files_moved_once, tuned, without_matplotlib_lookups


def wire(page: Page, on: Handlers) -> None:
    """Connect the page's events to the handlers; each API endpoint is named, and its inputs go to the handler by
    name in the contract's order (``endpoint_inputs``; Gradio's ``inputs_kwargs`` keeps that order for the API)."""
    def named(api_name: str) -> dict[str, Any]:
        return page.inputs(endpoint_inputs(api_name, page.controls.kwargs))
    # (Stop, the conversation and the render: not in the API)
    chat_outputs = [*page.out(CHAT_OUTPUTS), page.stop_btn, page.conversation, page.rendered]
    # An answer's progress is the stats line's own text (rendering, the engine's start, the prefill, the tokens so far),
    # and an error that ends it is its toast and the note beside the box: Gradio's progress and "Error" over the chat
    # would hide the conversation (and a failed answer's note in it), over the stats line the line itself
    answering = {"show_progress": "hidden"}
    chat_event = page.message.submit(on.submit, None, chat_outputs, api_name="chat", inputs_kwargs=named("chat"),
                                     **answering)
    retry_event = page.retry_btn.click(on.retry, None, chat_outputs, api_name="retry", inputs_kwargs=named("retry"),
                                       **answering)
    for answered in (chat_event, retry_event):  # the status line as the answer leaves the engine (not a tick later)
        answered.then(on.picker.state_text, page.model, page.engine_state, api_name=False, queue=False,
                      show_progress="hidden")
    # An answer's render: its panels in their own event (not repeated in every streamed update), the box cleared
    page.rendered.change(on.panels, page.rendered, page.out(RENDER_OUTPUTS), api_name="panels",
                         concurrency_limit=None, show_progress_on=[page.prompt])  # never behind the answers
    page.rendered.change(message_box, page.rendered, [page.message, page.urls], api_name=False, queue=False)
    # Export is built for a question only where it is open (every picture a PNG data URL: megabytes a question
    # otherwise encoded, post-processed and sent for a closed panel): as it opens, then with each answer's panels
    page.export.expand(on.export, None, page.out(EXPORT_OUTPUTS), api_name="export", concurrency_limit=None,
                       show_progress_on=[page.export_curl])  # (the light box: see inspecting below)
    page.export.collapse(on.export_closed, None, None, api_name=False, queue=False)
    # Stop ends the answer's stream, which shows the answer as stopped itself (Gradio's cancellation of the event
    # would leave its outputs marked "Error" on the page)
    page.stop_btn.click(on.stop, None, page.stop_btn, api_name="stop", queue=False)
    inspect_outputs = page.out(INSPECT_OUTPUTS)
    # An inspection's inputs; its progress shows on one light component: the browser re-reads every component that
    # ever showed an event's progress at every later event (Gradio 6.31), and Export's boxes hold megabytes
    inspecting = {"inputs_kwargs": named("inspect"), "show_progress_on": [page.prompt]}
    # The panels follow the conversation: after Undo, vLLM's render of what is left (Export: nothing sent yet)
    undone = page.undo_btn.click(on.undo, page.conversation, [*page.out(API_OUTPUTS["undo"]), page.conversation],
                                 api_name="undo", show_progress_on=[page.chat])
    undone.then(on.renders.follow, None, inspect_outputs, api_name=False, **inspecting)
    # Files attached are checked at once (a refused one leaves the box, the note beside it says why), and the panels
    # follow what is attached, as they follow a control (one render for the latest state: ``always_last``)
    page.message.change(on.renders.attachments, [page.message, page.attached],
                        [page.message, page.message_note, page.attached],
                        api_name=False, queue=False, show_progress="hidden", trigger_mode="always_last")
    page.attached.change(on.renders.attached, None, inspect_outputs, api_name=False, trigger_mode="always_last",
                         **inspecting)
    page.task.input(on.renders.task, [page.task, page.model, page.message], [page.message, page.message_note],
                    api_name=False, queue=False, show_progress="hidden")  # a reader's task: its prompt into the box
    page.clear_btn.click(on.clear, None, [*page.out(API_OUTPUTS["clear"]), page.conversation], api_name="clear",
                         show_progress_on=[page.chat])
    page.inspect_btn.click(on.renders.inspect, None, inspect_outputs, api_name="inspect", **inspecting)
    gr.api(on.renders.document_cost, api_name="document_cost")  # what a PDF will cost, for a program (an agent's tool)
    for control in page.controls.components:  # a slider on release (Enter in its box too), a checkbox on a click,
        # the pages box on Enter or on leaving it changed
        renders = on.renders
        moved = ([(control.input, renders.moved)] if isinstance(control, gr.Checkbox) else
                 [(control.submit, renders.moved), (control.blur, renders.left)] if isinstance(control, gr.Textbox) else
                 [(control.release, renders.moved)])
        for event, handler in moved:
            event(handler, None, inspect_outputs, api_name=False, trigger_mode="always_last", **inspecting)
    # A switch: the new model's controls, sampling, Detect, Compare's pickers and "starting" at once (property
    # updates only), its engine's start (the status follows it), and the panels from vLLM's renderer meanwhile
    # (a switch also stops the session's answer: a question that waits for one model's engine would keep the
    # message box from sending the next question, to the model now chosen, until that engine had started)
    switched = page.model.change(on.picker.switch, [page.model, page.current], on.picker.switch_outputs(),
                                 api_name=False, queue=False, show_progress="hidden")
    # (then the status of the model the picker shows now: a start that ended after another switch said its own)
    started = switched.then(on.picker.load_model, page.model, page.engine_state, api_name="load_model",
                            show_progress="hidden")
    started.then(on.picker.state_text, page.model, page.engine_state, api_name=False, queue=False,
                 show_progress="hidden")
    switched.then(on.renders.follow, None, inspect_outputs, api_name=False, **inspecting)
    page.timer.tick(on.picker.tick, page.model, [page.engine_state, page.timer], api_name=False, queue=False,
                    show_progress="hidden")
    for picker, side in ((page.model_a, page.controls_a), (page.model_b, page.controls_b)):
        picker.change(side.updates, picker, side.components, api_name=False, queue=False, show_progress="hidden")
    page.compare_btn.click(on.renders.compare, None, page.out(COMPARE_OUTPUTS), api_name="compare",
                           inputs_kwargs=named("compare"))


def message_box(rendered: tuple[int, Any]) -> tuple[Any, Any]:
    """The message box and the URL box as an answer's render changed them (``Page.rendered``): emptied once the engine
    has the question (True: the URLs went with it), the question put back where only the engine could refuse it (the
    box's value), else left as they are."""
    box = rendered[1]
    return (None, "") if box is True else (box if isinstance(box, dict) else gr.skip(), gr.skip())


def build_page(service: ChatService, default_model: str) -> tuple[gr.Blocks, Page]:
    """The page's Blocks and components: its layout, its handlers and the events between them."""
    service.derive_controls()  # models whose entries offer no controls get their processors' (once, before the page)
    with gr.Blocks(title="vlm-demo") as demo:
        page = layout(service, default_model)
        handlers = Handlers(service, page)
        wire(page, handlers)
        demo.load(handlers.picker.opened, page.model, [page.model, page.engine_state], api_name=False,
                  queue=False).then(None, js=OPENED_JS)
    return demo, page


def build_app(service: ChatService, default_model: str) -> gr.Blocks:
    """The page, with its queue as the settings say."""
    demo, _ = build_page(service, default_model)
    demo.queue(default_concurrency_limit=service.settings.queue_concurrency, max_size=service.settings.queue_max_size)
    tuned(demo._queue, service.settings.queue_poll_s)  # (Gradio's own looks for events every 1 ms, even when idle)
    without_matplotlib_lookups()
    files_moved_once()  # (every streamed update re-checked every picture in the chat, twice)
    return demo


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
  // The expansion gallery focuses the picture it opens on, and the browser scrolled the page to it: after each
  // answer the view jumped from the streaming answer to the gallery. Focused without scrolling, it stays put.
  const focus = HTMLElement.prototype.focus;
  HTMLElement.prototype.focus = function (options) {
    if (this.classList && this.classList.contains('thumbnail-item')) return focus.call(this, {...options, preventScroll: true});
    return focus.call(this, options);
  };
}"""
"""The page's own script, run once it has loaded."""

OPENED_JS = "() => { document.body.dataset.opened = 'yes'; }"
"""Marks the page once its load event has set the tab's model (the one whose engine runs, not the page's start-up
model it shows first): what a test waits for before it reads the page."""


def launch_kwargs(settings: Settings | None = None, service: ChatService | None = None,
                  host: str = "127.0.0.1") -> dict[str, Any]:
    """Arguments for ``Blocks.launch`` shared by the app and the tests: only the project's own
    pictures are served from disk besides uploads, and Gradio refuses uploads over the size limit; with ``service``
    (and the ``mcp_server`` setting on), the MCP tools for agents at ``MCP_PATH`` (the page served on ``host``)."""
    settings = settings or (service.settings if service is not None else Settings.from_env())
    found = {"css": CSS, "js": PAGE_JS, "head": HEAD, "allowed_paths": [str(ASSETS)],
             "max_file_size": settings.max_upload_bytes,
             # Gradio's run history keeps every event's inputs and outputs (chat, panels) in the browser's storage and
             # reads and writes all of it again at each streamed chunk: 0.3-0.8 s tasks per chunk of a document's
             # answer after a few questions. The conversation and its export are the app's own record.
             "run_history": False}
    if service is not None and settings.mcp_server:
        from . import mcp  # (the mcp package's imports only where its server is served)

        found["app_kwargs"] = mcp.app_kwargs(service, host)
    return found

