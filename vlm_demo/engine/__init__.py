"""The engine layer: the only code that imports vLLM (``remote.py`` talks to a vLLM server over HTTP
instead). Rendering and generation happen here: ``renderer.py`` (vLLM's renderer without an engine core),
``local.py`` (an in-process engine's generation), ``manager.py`` (engines started, shared and switched),
``startup.py`` (one engine's start and its arguments), ``processes.py`` (the engines' processes),
``forkserver.py`` and ``preload.py`` (their processes begin with torch and vLLM imported), ``availability.py``
(whether a model can start here),
``remote.py`` (an OpenAI-compatible server)."""

from .availability import Availability
from .local import Engine
from .manager import EngineManager
from .processes import has_gpu, session_nice, yield_to_other_sessions
from .reasoning import check_spec
from .remote import RemoteEngine
from .renderer import Renderer, chat_params
from .types import ItemGeometry, ItemRange, RenderedPrompt, TokenDelta

__all__ = ["Availability", "Engine", "EngineManager", "ItemGeometry", "ItemRange", "RemoteEngine", "RenderedPrompt", "Renderer",
           "TokenDelta", "chat_params", "check_spec", "has_gpu", "session_nice", "yield_to_other_sessions"]
