"""The engine layer: the only code that imports vLLM (``remote.py`` talks to a vLLM server over HTTP
instead). Rendering and generation happen here."""

from .local import Engine, EngineManager, Renderer, chat_params, has_gpu
from .reasoning import check_spec
from .remote import RemoteEngine
from .types import ItemGeometry, ItemRange, RenderedPrompt, TokenDelta

__all__ = ["Engine", "EngineManager", "ItemGeometry", "ItemRange", "RemoteEngine", "RenderedPrompt", "Renderer",
           "TokenDelta", "chat_params", "check_spec", "has_gpu"]
