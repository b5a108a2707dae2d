"""Command line: ``python -m vlm_demo {serve,models,inspect,chat,ground,read,audit}`` and ``python app.py`` (its serve
command in ``serving``): arguments in, a request to the chat service, its answer out; errors as one stderr line.
``main`` (the parser, what the arguments alone refuse, the entry points), ``commands`` (models, inspect, chat, audit),
``reading`` (ground, read)."""

from .commands import chat_text
from .main import build_parser, check_arguments, main, serve_main

__all__ = ["build_parser", "chat_text", "check_arguments", "main", "serve_main"]
