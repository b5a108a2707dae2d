"""What a clip will cost a model before anyone sends it, for programs (the MCP tool ``clip_cost``, an agent's): its
seconds, its rate and the model's, the tokens vLLM's renderer expands it to, and what the family's cap cuts. Nothing
is generated and no engine starts."""

from __future__ import annotations

from typing import Any

from ..inspector import clip_text, cut_seconds
from .asking import Ask, Source, ask_request
from .chat import ChatService

DEFAULT_QUESTION = "What is said?"


async def clip_cost(service: ChatService, clip: str, model: str, question: str = DEFAULT_QUESTION) -> dict[str, Any]:
    """The clip at ``clip`` (a ``data:audio/...`` or http(s) URL) rendered for ``model`` with ``question``, as every
    front end makes its request (``asking``): its figures, its range and share of the context, the rendered prompt.
    ``VlmDemoError`` (one line) for an unknown model, a model that does not listen, a bad clip."""
    ask = Ask(model=model, text=question, sources=(Source(clip, "url", "audio"),))
    request = await ask_request(ask, service.profiles, service.settings)
    inspection = await service.inspect(request, start_engine=False)
    (e,) = inspection.items["audio"]
    window = inspection.budget.max_model_len
    return {"model": model, "max_model_len": window, "seconds": e.seconds, "rate": e.rate_in, "model_rate": e.rate,
            "tokens": e.count, "range": [e.offset, e.offset + e.length], "feature_frames": e.feature_frames,
            "heard_seconds": e.heard_s, "cut_seconds": cut_seconds(e), "rule": e.rule, "said": clip_text(e),
            "prompt_tokens": inspection.budget.total, "share_of_context": round(e.length / window, 4) if window else None,
            "rendered_prompt": inspection.prompt, "content_format": inspection.content_format}
