"""The Gradio UI: the only module that imports gradio.

It turns user input into a ``ChatRequest``, runs the chat service and renders its events into
three side-by-side panels: the rendered prompt, the placeholder expansion and the chat.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from .errors import InputError, VlmDemoError
from .export import chat_completions_body, curl_command, python_snippet, serve_command
from . import families
from .inspector import Expansion, Inspection, draw_overlay, prompt_html, run_length_text
from .fetch import load_image_url
from .media import ImageEmbeds, Recent, image_digest, load_image, load_image_embeds
from .registry import Sampling
from .settings import ENCODED_IMAGES_KEPT, Settings
from .service import ChatRequest, ChatService, Delta, Done, Failed, Rendered, Turn

ASSETS = Path(__file__).resolve().parent.parent / "assets"
OVERLAYS = Path(tempfile.gettempdir()) / "vlm-demo-overlays"  # the expansion panel's pictures, named by content
TABLE_HEADERS = ["item", "placeholder", "token id", "count", "range", "size", "processed", "grid", "thumbnail"]
CSS = """
.prompt { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12px; max-height: 420px;
          overflow: auto; margin: 0; }
mark.ph { background: #ffd54f; color: #000; } mark.sp { background: #cfd8dc; color: #000; }
.budget { display: flex; height: 18px; border-radius: 4px; overflow: hidden; background: #e8f5e9; }
.budget .image { background: #ff7043; } .budget .video { background: #ab47bc; } .budget .txt { background: #42a5f5; }
"""
EXAMPLES = [
    ("wide-street.png", "How many tiles does this wide image become, and what is written on the signs?"),
    ("bar-chart.png", "Which quarter had the highest sales, and by how much?"),
]


def _state_text(service: ChatService, name: str) -> str:
    spec = service.registry.get(name)
    note = " · **random weights**: answers are noise, prompts and token counts are real" if spec.random_weights else ""
    state = f"remote: {spec.endpoint}" if spec.remote else service.engines.state(name)
    return f"{spec.display_label} — engine: **{state}**{note}"


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
            f'<p id="budget-text">{b.total:,} of {b.max_model_len:,} tokens: {words} · '
            f'text {b.text_tokens:,} · free {b.free:,}</p>')


def image_table(inspection: Inspection) -> list[list[Any]]:
    """One row per multimodal item for the expansion table."""
    def size(v):
        return f"{v[0]}x{v[1]}" if v else "-"
    return [[f"{e.modality} {e.index + 1}", e.placeholder, e.token_id, e.count, f"[{e.offset}, {e.offset + e.length})",
             size(e.orig_size), size(e.processed_size), f"{e.grid[0]}x{e.grid[1]}" if e.grid else "-",
             "-" if e.thumbnail is None else ("yes" if e.thumbnail else "no")] for e in inspection.expansions()]


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
    spec = service.registry.get(inspection.model)
    center_crop = families.get(inspection.family).center_crop
    specials = service.engines.special_tokens(spec.name)
    who = "vLLM inserted the placeholders" if inspection.content_format == "string" else "the template emits them"
    header = f'<p id="content-format">content format: <b>{inspection.content_format}</b> ({who})</p>'
    if inspection.geometry_note:
        header += f'<p id="geometry-note">{inspection.geometry_note}: counts, ids and ranges are vLLM\'s; no grid drawn</p>'

    gallery = [(overlay_file(img, im, center_crop),
                f"image {im.index + 1}: {im.count} tokens" + (f", {im.grid[0]}x{im.grid[1]}" if im.grid else ""))
               for img, im in zip(images, inspection.items.get("image", ()), strict=False)
               if not isinstance(img, ImageEmbeds)]
    return {"prompt": header + prompt_html(inspection, specials), "runs": run_length_text(inspection),
            "table": image_table(inspection), "gallery": gallery, "budget": budget_html(inspection)}


def _stats(done: Done) -> str:
    return (f"{done.num_tokens} tokens · time to first token **{done.ttft_s:.2f} s** · "
            f"**{done.tokens_per_s:.1f} tokens/s** · finish: {done.finish_reason}")


def build_app(service: ChatService, default_model: str) -> gr.Blocks:
    """The page. Every handler is an async function over the chat service."""
    registry, settings = service.registry, service.settings
    choices = [(spec.display_label, spec.name) for spec in registry.models]
    control_kwargs = sorted({c.kwarg for spec in registry.models for c in spec.controls})
    kinds = {c.kwarg: c.kind for spec in registry.models for c in spec.controls}

    def control_props(name: str, kwarg: str) -> dict[str, Any]:
        """Settings of the control for ``kwarg`` under model ``name`` (hidden when the model has none)."""
        own = registry.get(name).mm_control(kwarg)
        spec = own or next(c for m in registry.models for c in m.controls if c.kwarg == kwarg)
        label = spec.label if spec.default is not None else f"{spec.label} (checkpoint's own until moved)"
        props = {"value": registry.get(name).initial(kwarg) if own else spec.initial, "label": label,
                 "visible": own is not None}
        return props if spec.kind == "bool" else {**props, "minimum": spec.min, "maximum": spec.max, "step": spec.step}

    def control(name: str, kwarg: str, **extra: Any) -> Any:
        """A checkbox for a bool kwarg, else a slider."""
        kind = gr.Checkbox if kinds[kwarg] == "bool" else gr.Slider
        return kind(**control_props(name, kwarg), **extra)

    def control_updates(name: str) -> list[Any]:
        return [control(name, k) for k in control_kwargs]

    def make_request(model: str, turns: list[Turn], system: str, sampling: tuple, values: tuple) -> ChatRequest:
        spec = registry.get(model)
        mm_kwargs = {}
        for kwarg, value in zip(control_kwargs, values, strict=True):
            own = spec.mm_control(kwarg)
            if own is None or value is None:
                continue
            value = bool(value) if kinds[kwarg] == "bool" else int(value)
            if own.default is not None or value != spec.initial(kwarg):  # unmoved: the checkpoint's own applies
                mm_kwargs[kwarg] = value
        temperature, top_p, max_tokens, seed = sampling
        sampling_params = Sampling(temperature=float(temperature), top_p=float(top_p), max_tokens=int(max_tokens),
                                   seed=int(seed) if seed not in (None, "", -1) else None,
                                   ignore_eos=spec.sampling.ignore_eos)  # models.yaml's; the page has no control
        return ChatRequest(model=model, turns=tuple(turns), system=system or "", mm_kwargs=mm_kwargs,
                           sampling=sampling_params)

    async def read_message(message: dict | None, url_text: str | None) -> tuple[str, list[str], list[str], tuple]:
        """The message's text, its uploaded file paths, its URLs (one a line in ``url_text``), and every
        image decoded and checked (uploads first, then the URLs)."""
        text = (message or {}).get("text", "") or ""
        files = [f if isinstance(f, str) else f["path"] for f in (message or {}).get("files", []) or []]
        links = [line.strip() for line in (url_text or "").splitlines() if line.strip()]
        try:
            images = [load_image_embeds(path, settings) if path.endswith(".safetensors")
                      else load_image(path, settings, name=Path(path).name)  # not the server's upload folder
                      for path in files]
            if len(files) + len(links) > settings.max_images_per_turn:
                raise InputError(f"{len(files) + len(links)} images in one message; the limit is "
                                 f"{settings.max_images_per_turn}")
            images += [await load_image_url(link, settings) for link in links]
        except VlmDemoError as exc:
            raise gr.Error(str(exc)) from None
        return text, files, links, tuple(images)

    async def to_inspect(message: dict[str, Any] | None, turns: list[Turn], url_text: str) -> list[Turn]:
        """The conversation to inspect: with the typed message, or else up to the last question."""
        text, _, _, images = await read_message(message, url_text)
        if text or images:
            return [*turns, Turn("user", text, {"image": images} if images else {})]
        return turns[:-1] if turns and turns[-1].role == "assistant" else turns

    async def run_chat(turns: list[Turn], history: list[dict[str, Any]], request: ChatRequest,
                       rollback: list[dict[str, Any]]):
        """Stream one answer; yields dicts of panel updates, grouped by time (the first at once).
        On failure the chat goes back to ``rollback``, so it stays in step with the turns.

        Each streamed update repeats the panels' values rather than leaving them out: Gradio turns an
        output left out of a dict into a property update, and rebuilds that component's configuration
        (its JSON schema included) on every update, which cost more than the rest of the update together.
        Repeated values are cheap to process and reach the browser as an empty diff. Only the message box
        and the conversation state are left out (the box may hold the user's next question)."""
        images = [im for t in request.turns for im in t.media.get("image", ())]
        history = [*history, {"role": "assistant", "content": ""}]
        shown: dict[Any, Any] = {}
        last = 0.0
        async with contextlib.aclosing(service.chat(request)) as events:
            async for event in events:
                if isinstance(event, Failed):
                    yield {chatbot: rollback}
                    raise gr.Error(event.message)
                if isinstance(event, Rendered):
                    p = panels(service, event.inspection, images)
                    spec = registry.get(request.model)
                    body = chat_completions_body(request, spec)
                    shown = {prompt_box: p["prompt"], runs_box: p["runs"], table: p["table"], gallery: p["gallery"],
                             budget: p["budget"], stats: "generating…",
                             engine_state: _state_text(service, request.model),
                             export_json: json.dumps(body, indent=1),
                             export_curl: serve_command(spec) + "\n\n" + curl_command(spec),
                             export_py: python_snippet(body, spec)}
                    yield {**shown, chatbot: history, box: None}  # None clears the box (a value, not a costly update)
                elif isinstance(event, Delta):
                    history[-1] = {"role": "assistant", "content": event.answer}
                    now = time.perf_counter()
                    if now - last >= settings.ui_update_interval_s:
                        last = now
                        yield {**shown, chatbot: history}
                elif isinstance(event, Done):
                    history[-1] = {"role": "assistant", "content": event.answer}
                    yield {**shown, chatbot: history, stats: _stats(event),
                           state: [*turns, Turn("assistant", event.answer)]}

    async def submit(message, history, turns, model, system, temperature, top_p, max_tokens, seed, *rest):
        *sliders, url_text = rest
        text, files, links, images = await read_message(message, url_text)
        turns = [*turns, Turn("user", text, {"image": images} if images else {})]
        request = make_request(model, turns, system, (temperature, top_p, max_tokens, seed), sliders)
        shown = text + "".join(f"\n[image: {link[:80]}]" for link in links)
        new_history = [*history, {"role": "user", "content": [*({"path": p} for p in files), shown]}]
        async for update in run_chat(turns, new_history, request, rollback=history):
            yield update

    async def retry(history, turns, model, system, temperature, top_p, max_tokens, seed, *sliders):
        if len(turns) < 2:
            raise gr.Error("nothing to retry yet")
        request = make_request(model, turns[:-1], system, (temperature, top_p, max_tokens, seed), sliders)
        async for update in run_chat(turns[:-1], history[:-1], request, rollback=history):
            yield update

    def undo(history, turns):
        return {chatbot: history[:-2], state: turns[:-2]}

    def clear():
        return {chatbot: [], state: [], prompt_box: "", runs_box: "", table: [], gallery: [], budget: "", stats: ""}

    async def inspect_only(message, turns, model, system, *rest):
        """Render and expand without generating (the sliders call this as they move)."""
        *sliders, url_text = rest
        turns = await to_inspect(message, turns, url_text)
        if not turns:
            return {stats: "add an image or a question to inspect"}
        request = make_request(model, turns, system, (0.0, 1.0, 1, None), sliders)
        try:
            inspection = await service.inspect(request)
        except VlmDemoError as exc:
            raise gr.Error(str(exc)) from None
        p = panels(service, inspection, [im for t in request.turns for im in t.media.get("image", ())])
        return {prompt_box: p["prompt"], runs_box: p["runs"], table: p["table"], gallery: p["gallery"],
                budget: p["budget"], engine_state: _state_text(service, model)}

    async def load_model(name: str, progress=gr.Progress(track_tqdm=True)):
        progress(0, desc=f"starting the {name} engine…")
        try:
            await service.engines.get(registry.get(name))
        except VlmDemoError as exc:
            raise gr.Error(str(exc)) from None
        return _state_text(service, name)

    async def compare(message, turns, model_a, kwargs_a, model_b, kwargs_b, url_text):
        all_turns = await to_inspect(message, turns, url_text)
        if not all_turns:
            raise gr.Error("add an image and a question first")
        outputs = []
        for model, raw in ((model_a, kwargs_a), (model_b, kwargs_b)):
            try:
                kwargs = json.loads(raw or "{}")
                inspection = await service.inspect(ChatRequest(model=model, turns=tuple(all_turns), mm_kwargs=kwargs))
            except ValueError as exc:
                raise gr.Error(f"settings must be JSON, e.g. {{\"max_pixels\": 200704}} ({exc})") from None
            except VlmDemoError as exc:
                raise gr.Error(str(exc)) from None
            p = panels(service, inspection, [im for t in all_turns for im in t.media.get("image", ())])
            outputs += [p["budget"] + p["prompt"], p["gallery"]]
        return outputs

    with gr.Blocks(title="vlm-demo") as demo:
        gr.Markdown("# vlm-demo\nChat with a vision-language model served by vLLM and see exactly what the "
                    "engine receives: the rendered prompt, each image's tokens, and the streamed answer.")
        state = gr.State([])
        with gr.Row():
            model = gr.Dropdown(choices=choices, value=default_model, label="Model", scale=2, elem_id="model")
            engine_state = gr.Markdown(_state_text(service, default_model), elem_id="engine-state")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=260):
                system = gr.Textbox(label="System prompt", placeholder="(the chat template's default)", lines=2)
                sliders = [control(default_model, k, elem_id=f"slider-{k}") for k in control_kwargs]
                spec = registry.get(default_model)
                with gr.Accordion("Sampling", open=False, elem_id="sampling"):
                    temperature = gr.Slider(0, 2, value=spec.sampling.temperature, step=0.05, label="temperature")
                    top_p = gr.Slider(0.05, 1, value=spec.sampling.top_p, step=0.05, label="top_p")
                    max_tokens = gr.Slider(1, 2048, value=spec.sampling.max_tokens, step=1, label="max_tokens")
                    seed = gr.Number(value=-1, precision=0, label="seed (-1: random)", elem_id="seed")
                inspect_btn = gr.Button("Inspect only", elem_id="inspect")
            with gr.Column(scale=2):
                gr.Markdown("### 1 · Rendered prompt")
                prompt_box = gr.HTML(elem_id="rendered-prompt")
                gr.Markdown("### 2 · Placeholder expansion")
                budget = gr.HTML(elem_id="budget")
                runs_box = gr.Textbox(label="Token sequence (runs)", lines=4, max_lines=10, elem_id="runs")
                table = gr.Dataframe(headers=TABLE_HEADERS, label="Images", elem_id="image-table", interactive=False)
                gallery = gr.Gallery(label="What the processor did", columns=2, height=260, elem_id="overlays")
            with gr.Column(scale=2):
                gr.Markdown("### 3 · Chat")
                chatbot = gr.Chatbot(label="Chat", elem_id="chat", height=440)
                box = gr.MultimodalTextbox(file_types=["image", ".safetensors"], file_count="multiple",
                                           elem_id="question",
                                           placeholder="Ask about the images (upload, paste or drop them here)")
                urls = gr.Textbox(label="Image URLs (one a line; http(s) from allowed hosts, or data:)",
                                  visible=settings.url_fetch, lines=1, elem_id="image-urls")
                stats = gr.Markdown(elem_id="stats")
                with gr.Row():
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                    retry_btn = gr.Button("Retry")
                    undo_btn = gr.Button("Undo")
                    clear_btn = gr.Button("Clear")
        examples = [[{"text": q, "files": [str(ASSETS / f)]}] for f, q in EXAMPLES if (ASSETS / f).exists()]
        if (ASSETS / "shape-a.png").exists():
            examples.append([{"text": "What differs between the two pictures?",
                              "files": [str(ASSETS / "shape-a.png"), str(ASSETS / "shape-b.png")]}])
        if examples:
            gr.Examples(examples, [box], label="Examples (made by this project)")
        with gr.Accordion("Export: replay this request against vllm serve", open=False):
            export_curl = gr.Code(label="vllm serve + curl", language="shell")
            export_json = gr.Code(label="request.json (OpenAI chat completions)", language="json")
            export_py = gr.Code(label="Python (openai)", language="python")
        with gr.Accordion("Compare two settings", open=False):
            with gr.Row():
                model_a = gr.Dropdown(choices=choices, value=default_model, label="A: model")
                kwargs_a = gr.Textbox(label="A: image settings (JSON)", value="{}")
                model_b = gr.Dropdown(choices=choices, value=default_model, label="B: model")
                kwargs_b = gr.Textbox(label="B: image settings (JSON)", value="{}")
            compare_btn = gr.Button("Compare (inspect both)")
            with gr.Row():
                with gr.Column():
                    cmp_a, cmp_a_gallery = gr.HTML(), gr.Gallery(columns=2, height=220)
                with gr.Column():
                    cmp_b, cmp_b_gallery = gr.HTML(), gr.Gallery(columns=2, height=220)

        sampling_inputs = [temperature, top_p, max_tokens, seed, *sliders]
        outputs = [prompt_box, runs_box, table, gallery, budget, chatbot, stats, box, engine_state, state,
                   export_json, export_curl, export_py]
        chat_event = box.submit(submit, [box, chatbot, state, model, system, *sampling_inputs, urls], outputs,
                                api_name="chat")
        chat_event.success(lambda: "", None, urls, api_name=False)  # the URLs went with the question
        retry_event = retry_btn.click(retry, [chatbot, state, model, system, *sampling_inputs], outputs,
                                      api_name="retry")
        stop_btn.click(None, None, None, cancels=[chat_event, retry_event], api_name="stop")
        undo_btn.click(undo, [chatbot, state], [chatbot, state], api_name="undo")
        clear_btn.click(clear, None, [chatbot, state, prompt_box, runs_box, table, gallery, budget, stats],
                        api_name="clear")
        inspect_inputs = [box, state, model, system, *sliders, urls]
        inspect_outputs = [prompt_box, runs_box, table, gallery, budget, engine_state, stats]
        inspect_btn.click(inspect_only, inspect_inputs, inspect_outputs, api_name="inspect")
        for control in sliders:  # a slider on release, a checkbox on each click
            moved = control.input if isinstance(control, gr.Checkbox) else control.release
            moved(inspect_only, inspect_inputs, inspect_outputs, api_name=False, trigger_mode="always_last")
        model.change(control_updates, model, sliders, api_name=False).then(
            lambda name: _state_text(service, name), model, engine_state, api_name=False).then(
            load_model, model, engine_state, api_name="load_model")
        demo.load(lambda name: _state_text(service, name), model, engine_state, api_name=False)
        compare_btn.click(compare, [box, state, model_a, kwargs_a, model_b, kwargs_b, urls],
                          [cmp_a, cmp_a_gallery, cmp_b, cmp_b_gallery], api_name="compare")
    demo.queue(default_concurrency_limit=settings.queue_concurrency, max_size=settings.queue_max_size)
    return demo


def launch_kwargs(settings: Settings | None = None) -> dict[str, Any]:
    """Arguments for ``Blocks.launch`` shared by the app and the tests: only the project's own
    pictures are served from disk besides uploads, and Gradio refuses uploads over the size limit."""
    settings = settings or Settings.from_env()
    return {"css": CSS, "allowed_paths": [str(ASSETS)], "max_file_size": settings.max_upload_bytes}

