"""The app as it is served (``python app.py``), for the benchmark: the same page, service and engine, with
every answer generated to its full ``max_tokens`` (``ignore_eos``), so all paths produce the same tokens.

    python -m bench.app_server --port PORT --model NAME [--ui-update-interval-s S]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import sys

from vlm_demo.serving import exit_on_sigterm
from vlm_demo.engine import EngineManager
from vlm_demo.profile import load_registry
from vlm_demo.service import ChatRequest, ChatService
from vlm_demo.settings import Settings
from vlm_demo.ui.app import build_app, launch_kwargs


class FixedLengthService(ChatService):
    """The chat service with ``ignore_eos`` set on every request (the page has no such control)."""

    def chat(self, request: ChatRequest, *args, **kwargs):  # type: ignore[override]
        # (positional arguments too: a document read page by page asks each page with ``self.chat(one, preview,
        # sent)``)
        sampling = request.sampling or self.registry.get(request.model).sampling
        request = dataclasses.replace(request, sampling=dataclasses.replace(sampling, ignore_eos=True))
        return super().chat(request, *args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--ui-update-interval-s", type=float, default=None)
    args = p.parse_args(argv)
    settings = Settings.from_env()
    if args.ui_update_interval_s is not None:
        settings = dataclasses.replace(settings, ui_update_interval_s=args.ui_update_interval_s)
    registry = load_registry(settings.models_file)
    engines = EngineManager(settings)
    atexit.register(engines.shutdown_all)
    exit_on_sigterm()
    demo = build_app(FixedLengthService(registry, engines, settings), default_model=args.model)
    demo.launch(server_name="127.0.0.1", server_port=args.port, quiet=True, **launch_kwargs(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
