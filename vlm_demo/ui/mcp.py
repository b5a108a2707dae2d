"""The page's MCP server, for agents: what a document or picture will cost a model (pages, tokens per page, total
against the context, the rendered prompt), what a clip will cost one that listens, before anything is sent, and which
models and settings there are.
Served over MCP's streamable HTTP at ``MCP_PATH`` of the page's own server (the URL where Gradio serves its MCP).

Gradio's own MCP server (``launch(mcp_server=True)``) is not used: Gradio 6.31's needs ``mcp<2`` (its 1.x API),
and vLLM 0.32 requires ``mcp>=2``; this is the ``mcp`` 2.x package's own server, mounted on Gradio's FastAPI app
with its session manager run in the app's lifespan. Its tools answer as the page's ``/document_cost`` does (the
same function, ``service.document_cost``); a bad input is a tool error of one line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from ..errors import VlmDemoError
from ..service import ChatService
from ..service.clip_cost import DEFAULT_QUESTION as CLIP_QUESTION
from ..service.clip_cost import clip_cost
from ..service.document_cost import DEFAULT_QUESTION, document_cost

MCP_PATH = "/gradio_api/mcp"
"""Where the tools are served (streamable HTTP), on the page's host and port."""


def server(service: ChatService) -> MCPServer:
    """The MCP server with the app's tools over ``service`` (its models, engines' renderers and settings)."""
    mcp = MCPServer(name="vlm-demo", instructions=(
        "Ask what a PDF, picture or sound clip will cost a model before sending it: `models` lists the models "
        "and their settings, `document_cost` renders each page with vLLM's renderer, `clip_cost` a clip (nothing is "
        "generated)."))

    @mcp.tool(description="The models this app serves: name, label, family, context window (max_model_len; null: "
                          "the checkpoint's), whether each can run here (else why not), and the per-request "
                          "processor settings each takes (document_cost's `settings`).")
    async def models() -> list[dict[str, Any]]:
        found = []
        for spec in service.registry.models:
            can = await asyncio.to_thread(service.availability, spec.name)
            controls = [{"kwarg": c.kwarg, "kind": c.kind, "min": c.min, "max": c.max, "default": c.default}
                        for c in service.profile(spec.name).controls]
            found.append({"name": spec.name, "label": spec.label, "family": service.profile(spec.name).adapter.name,
                          "max_model_len": spec.engine_args.max_model_len, "runs_here": can.runnable,
                          "why_not": "" if can.runnable else can.reason, "controls": controls})
        return found

    @mcp.tool(name="document_cost", description=(
        "What a PDF (or a picture) will cost a model before anyone sends it: each page's vision tokens as vLLM's "
        "renderer expands it (as its own request, and all pages in one request), against the model's context "
        "window, with the rendered prompt. Nothing is generated and no engine starts."))
    async def document_cost_tool(
        document: Annotated[str, Field(description="the PDF or picture as a data: URL "
                                                   "(data:application/pdf;base64,...) or an http(s) URL")],
        model: Annotated[str, Field(description="a model name, as `models` lists them")],
        pages: Annotated[str, Field(description='which pages of a PDF, from 1, e.g. "1-3,7" (empty: all)')] = "",
        dpi: Annotated[int, Field(description="resolution the pages are rasterised at, 72-300 (0: the model "
                                              "family's, else 144)")] = 0,
        question: Annotated[str, Field(description="the text asked with it (its tokens count too)")] = DEFAULT_QUESTION,
        settings: Annotated[dict[str, Any] | None, Field(description="the model's processor settings by kwarg, as "
                                                                     '`models` lists them, e.g. {"max_pixels": 200704}'
                                                         )] = None,
    ) -> dict[str, Any]:
        try:
            return await document_cost(service, document, model, pages, dpi, question, settings)
        except VlmDemoError as exc:
            raise ToolError(str(exc)) from None

    @mcp.tool(name="clip_cost", description=(
        "What a sound clip will cost a model that listens before anyone sends it: its seconds, its sampling rate and "
        "the model's, the audio tokens vLLM's renderer expands it to, what the model's cap cuts (Qwen2-Audio hears "
        "30 s), its share of the context window, with the rendered prompt. Nothing is generated."))
    async def clip_cost_tool(
        clip: Annotated[str, Field(description="the clip (WAV, FLAC, Ogg/Opus, MP3, M4A/AAC or WebM) as a data: URL "
                                               "(data:audio/wav;base64,...) or an http(s) URL")],
        model: Annotated[str, Field(description="a model name, as `models` lists them")],
        question: Annotated[str, Field(description="the text asked with it")] = CLIP_QUESTION,
    ) -> dict[str, Any]:
        try:
            return await clip_cost(service, clip, model, question)
        except VlmDemoError as exc:
            raise ToolError(str(exc)) from None

    return mcp


def app_kwargs(service: ChatService, host: str) -> dict[str, Any]:
    """``Blocks.launch(app_kwargs=...)`` that serve the MCP tools at ``MCP_PATH`` of the page's server: the routes
    ahead of the page's own, the MCP session manager running while the server does."""
    mcp = server(service)
    # (a tool's call carries its PDF or clip as a data: URL: mcp's 4-MiB default refused a 45-s clip; the app's own
    # byte limits for each attachment apply inside the tools)
    largest = max(service.settings.max_upload_bytes, service.settings.max_audio_bytes)
    asgi = mcp.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host,
                                   max_request_body_size=largest * 4 // 3 + (1 << 16))

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        app.router.routes[0:0] = asgi.routes  # before the page's own (its catch-all paths)
        async with mcp.session_manager.run():
            yield

    return {"lifespan": lifespan}
