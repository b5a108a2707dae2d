"""The engine layer: the only code that imports vLLM. Rendering and generation happen here."""

from .local import Engine, EngineManager, chat_params, has_gpu
from .types import ImageGeometry, ImageRange, RenderedPrompt, TokenDelta

__all__ = ["Engine", "EngineManager", "ImageGeometry", "ImageRange", "RenderedPrompt", "TokenDelta",
           "chat_params", "has_gpu"]
