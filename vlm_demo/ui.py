"""The Gradio UI: the only module that imports gradio.

It turns user input into a ``ChatRequest``, runs ``ChatService.chat`` and renders its events.
"""

from __future__ import annotations

import contextlib
from typing import Any

import gradio as gr

from .engine import RenderedPrompt
from .errors import VlmDemoError
from .media import load_image
from .service import ChatRequest, ChatService, Delta, Done, Failed, Rendered, Turn


def _state_text(service: ChatService, name: str) -> str:
    spec = service.registry.get(name)
    state = service.engines.state(name)
    note = " · answers are noise: random weights" if spec.random_weights else ""
    return f"**{spec.display_label}** — engine: {state}{note}"


def expansion_markdown(rendered: RenderedPrompt) -> str:
    """A short summary of how each image became tokens and how much context is used."""
    n_total = len(rendered.prompt_token_ids)
    n_image = sum(r.length for r in rendered.image_ranges)
    rows = [f"content format: `{rendered.content_format}` · prompt tokens: {n_total:,} "
            f"(image {n_image:,}, text {n_total - n_image:,}) of {rendered.max_model_len:,}"]
    for i, r in enumerate(rendered.image_ranges, 1):
        rows.append(f"- image {i}: {r.length} tokens at [{r.offset}, {r.offset + r.length})")
    return "\n".join(rows)


def _stats(done: Done) -> str:
    return (f"{done.num_tokens} tokens · time to first token {done.ttft_s:.2f} s · "
            f"{done.tokens_per_s:.1f} tokens/s · finish: {done.finish_reason}")


def build_app(service: ChatService, default_model: str) -> gr.Blocks:
    """The page: model picker, chat with images, rendered prompt and expansion panels."""
    registry = service.registry
    choices = [(spec.display_label, spec.name) for spec in registry.models]

    async def respond(message: dict[str, Any], history: list[dict[str, Any]], turns: list[Turn],
                      model: str, system: str):
        text = (message or {}).get("text", "") or ""
        files = [f if isinstance(f, str) else f["path"] for f in (message or {}).get("files", [])]
        try:
            images = tuple(load_image(path, service.settings) for path in files)
        except VlmDemoError as exc:
            raise gr.Error(str(exc)) from None
        new_turns = [*turns, Turn("user", text, images)]
        request = ChatRequest(model=model, turns=tuple(new_turns), system=system or "")
        user_msg = {"role": "user", "content": [*({"path": p} for p in files), text]}
        history = [*history, user_msg, {"role": "assistant", "content": ""}]
        prompt_text, expansion, answer = "", "", ""
        async with contextlib.aclosing(service.chat(request)) as events:
            async for event in events:
                if isinstance(event, Failed):
                    raise gr.Error(event.message)
                if isinstance(event, Rendered):
                    prompt_text = event.rendered.prompt
                    expansion = expansion_markdown(event.rendered)
                    yield (history, prompt_text, expansion, "generating…", turns, gr.MultimodalTextbox(value=None),
                           _state_text(service, model))
                elif isinstance(event, Delta):
                    answer = event.answer
                    history[-1] = {"role": "assistant", "content": answer}
                    yield history, prompt_text, expansion, "generating…", turns, gr.skip(), gr.skip()
                elif isinstance(event, Done):
                    history[-1] = {"role": "assistant", "content": event.answer}
                    final_turns = [*new_turns, Turn("assistant", event.answer)]
                    yield history, prompt_text, expansion, _stats(event), final_turns, gr.skip(), gr.skip()

    def clear():
        return [], [], "", "", ""

    with gr.Blocks(title="vlm-demo") as demo:
        gr.Markdown("# vlm-demo\nChat with a vision-language model served by vLLM, "
                    "and see exactly what the engine receives.")
        with gr.Row():
            model = gr.Dropdown(choices=choices, value=default_model, label="Model", scale=2)
            engine_state = gr.Markdown(_state_text(service, default_model))
        system = gr.Textbox(label="System prompt", placeholder="(the chat template's default)", lines=1)
        turns = gr.State([])
        with gr.Row(equal_height=False):
            with gr.Column():
                prompt_box = gr.Code(label="Rendered prompt (chat template output)", language=None,
                                     interactive=False, elem_id="rendered-prompt")
            with gr.Column():
                expansion_box = gr.Markdown(elem_id="expansion")
            with gr.Column():
                chatbot = gr.Chatbot(label="Chat", elem_id="chat", height=420)
                box = gr.MultimodalTextbox(file_types=["image"], file_count="multiple", elem_id="question",
                                           placeholder="Ask about the images (upload, paste or drop them here)")
                stats = gr.Markdown(elem_id="stats")
                clear_btn = gr.Button("Clear")
        box.submit(respond, [box, chatbot, turns, model, system],
                   [chatbot, prompt_box, expansion_box, stats, turns, box, engine_state], api_name="chat")
        clear_btn.click(clear, None, [chatbot, turns, prompt_box, expansion_box, stats], api_name="clear")
        model.change(lambda name: _state_text(service, name), model, engine_state, api_name=False)
        demo.load(lambda name: _state_text(service, name), model, engine_state, api_name=False)
    demo.queue(default_concurrency_limit=service.settings.queue_concurrency,
               max_size=service.settings.queue_max_size)
    return demo

