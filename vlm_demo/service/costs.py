"""What a document (or a picture) will cost a model before anyone sends it, for programs: the page's ``/document_cost``
endpoint and the MCP tool of the same name (an agent's) both answer with this. Nothing is generated and no engine
starts: each page is rendered by vLLM's renderer as its own request, and all pages as one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import intake, profile
from ..intake import DocumentOptions
from ..settings import DOCUMENT_DPI
from .chat import ChatService
from .pages import page_requests
from .requests import ChatRequest, Turn

DEFAULT_QUESTION = "Read this document."


async def document_cost(service: ChatService, document: str, model: str, pages: str = "", dpi: int = 0,
                        question: str = DEFAULT_QUESTION, controls: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each page's vision tokens as vLLM's renderer expands it (as its own request, and all pages in one), against
    the model's context window, with the first page's rendered prompt. ``document``: a data: or http(s) URL of a
    PDF or a picture; ``pages``/``dpi`` as the page's document controls (empty / 0: all pages, the family's DPI);
    ``controls``: the model's per-request processor settings by kwarg (``{"max_pixels": 200704}``).
    ``VlmDemoError`` (one line) for an unknown model, a bad document or setting."""
    spec = service.registry.get(model)
    options = DocumentOptions(dpi=dpi or profile.adapter(spec).document_dpi or DOCUMENT_DPI, pages=pages or "")
    items = await intake.load_url(document, service.settings, documents=options)
    request = ChatRequest(model, (Turn("user", question, {"image": items}),), mm_kwargs=dict(controls or {}),
                          each_page=True)
    split = page_requests(request) if any(isinstance(i, intake.Page) for i in items) else [(None, request)]
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
