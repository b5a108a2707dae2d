"""Command line: ``python -m vlm_demo {serve,models}`` and ``python app.py``."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys

from .errors import VlmDemoError
from .registry import Registry, load_registry
from .settings import Settings


def _registry(settings: Settings) -> Registry:
    return load_registry(settings.models_file)


def cmd_models(args: argparse.Namespace, settings: Settings) -> int:
    """Print the registry, one model a line."""
    registry = _registry(settings)
    for spec in registry.models:
        source = spec.repo or spec.path or f"tiny {spec.family} (built offline)"
        sliders = ", ".join(f"{s.kwarg}={s.min}..{s.max}" for s in spec.sliders) or "-"
        print(f"{spec.name:22} {spec.display_label:40} {source:36} sliders: {sliders}")
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the Gradio page."""
    from .engine import EngineManager, has_gpu
    from .service import ChatService
    from .ui import build_app

    registry = _registry(settings)
    name = args.model or os.environ.get("VLM_DEMO_MODEL") or registry.default(has_gpu()).name
    registry.get(name)  # unknown names fail here, before the server starts
    engines = EngineManager(settings)
    atexit.register(engines.shutdown_all)
    demo = build_app(ChatService(registry, engines, settings), default_model=name)
    host = args.host or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = args.port or int(os.environ.get("GRADIO_SERVER_PORT") or 7860)
    demo.launch(server_name=host, server_port=port)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vlm_demo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the Gradio page (what python app.py does)")
    add_serve_args(serve)
    serve.set_defaults(func=cmd_serve)
    models = sub.add_parser("models", help="list the models of models.yaml")
    models.set_defaults(func=cmd_models)
    return parser


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model to select at start (default: first tiny model on CPU, "
                        "first real one on GPU; env VLM_DEMO_MODEL)")
    parser.add_argument("--host", help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env GRADIO_SERVER_PORT; default 7860)")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, Settings.from_env())
    except VlmDemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def serve_main(argv: list[str] | None = None) -> int:
    """``python app.py``: the serve command's flags only."""
    return main(["serve", *sys.argv[1:]] if argv is None else ["serve", *argv])
