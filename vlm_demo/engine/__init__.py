"""The engine layer: the only code that imports vLLM (``remote.py`` talks to a vLLM server over HTTP
instead). Rendering and generation happen here."""

from .local import Engine, EngineManager, chat_params, has_gpu
from .remote import RemoteEngine
from .types import ImageGeometry, ImageRange, RenderedPrompt, TokenDelta

__all__ = ["Engine", "EngineManager", "ImageGeometry", "ImageRange", "RemoteEngine", "RenderedPrompt", "TokenDelta",
           "chat_params", "has_gpu"]
