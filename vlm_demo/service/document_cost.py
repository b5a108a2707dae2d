"""What a document (or a picture) will cost a model before anyone sends it, for programs: the page's ``/document_cost``
endpoint and the MCP tool of the same name (an agent's) both answer with this. Nothing is generated and no engine
starts: each page is rendered by vLLM's renderer as its own request, and all pages as one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .asking import Ask, Source, ask_request
from .chat import ChatService
from .pages import page_requests
from .requests import ChatRequest

DEFAULT_QUESTION = "Read this document."


async def cost_request(service: ChatService, document: str, model: str, pages: str = "", dpi: int = 0,
                       question: str = DEFAULT_QUESTION, controls: Mapping[str, Any] | None = None) -> ChatRequest:
    """The request whose cost ``document_cost`` tells, made as every front end makes its request (``asking``): the
    document a URL, each page on its own."""
    ask = Ask(model=model, text=question, sources=(Source(document, "url"),), settings=dict(controls or {}),
              pages=pages or "", dpi=dpi or 0, each_page=True)
    return await ask_request(ask, service.profiles, service.settings)


async def document_cost(service: ChatService, document: str, model: str, pages: str = "", dpi: int = 0,
                        question: str = DEFAULT_QUESTION, controls: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each page's vision tokens as vLLM's renderer expands it (as its own request, and all pages in one), against
    the model's context window, with the first page's rendered prompt. ``document``: a data: or http(s) URL of a
    PDF or a picture; ``pages``/``dpi`` as the page's document controls (empty / 0: all pages, the family's DPI);
    ``controls``: the model's per-request processor settings by kwarg (``{"max_pixels": 200704}``).
    ``VlmDemoError`` (one line) for an unknown model, a bad document or setting."""
    request = await cost_request(service, document, model, pages, dpi, question, controls)
    split = page_requests(request) if request.each_page else [(None, request)]
    rendered = [await service.inspect(one, start_engine=False) for _, one in split]
    found = [(one.items["image"][-1], one.budget.total) for one in rendered]
    window = rendered[0].budget.max_model_len
    costs = [{"page": e.page, "source": e.source, "size": e.orig_size, "processed_size": e.processed_size,
              "dpi": e.dpi, "tokens": e.count, "positions": e.length, "request_tokens": total,
              "fits": total < window} for e, total in found]
    vision = sum(e.length for e, _ in found)
    return {"model": model, "max_model_len": window, "pages": costs, "vision_tokens": vision,
            "all_in_one_request_tokens": vision + rendered[0].budget.text_tokens,
            "all_in_one_request_fits": vision + rendered[0].budget.text_tokens < window,
            "rendered_prompt": rendered[0].prompt, "content_format": rendered[0].content_format,
            "mm_processor_kwargs": rendered[0].mm_kwargs}
