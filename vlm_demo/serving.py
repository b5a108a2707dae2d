"""``python app.py``: the page served until SIGTERM or SIGINT, then stopped in order (the page closes, the engines
shut down, no process of ours outlives the app), exiting with status 0."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time

from . import profile
from .errors import VlmDemoError
from .registry import Registry
from .settings import Settings


def load_registry(settings: Settings) -> Registry:
    """``models.yaml`` read and checked as every command reads it: against each entry's family and by the engine
    layer (its reasoning parser)."""
    from .engine import check_spec

    return profile.load_registry(settings.models_file, check_spec)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the Gradio page until SIGTERM (``kill``, ``docker stop``) or SIGINT (Ctrl-C), then stop in
    order (``_stop_serving``) and exit with status 0: the stop was asked for and done, nothing failed (128 +
    the signal's number is what a shell reports for a process the signal killed, which this one is not)."""
    from .engine import EngineManager, has_gpu, yield_to_other_sessions
    from .service import ChatService
    from .ui.app import build_app, launch_kwargs

    registry = load_registry(settings)
    name = args.model or os.environ.get("VLM_DEMO_MODEL") or registry.default(has_gpu()).name
    registry.get(name)  # unknown names fail here, before the server starts
    engines = EngineManager(settings)
    engines.warm()  # engine processes' imports now, beside the page's build
    nice_before = yield_to_other_sessions(settings.session_nice)
    if nice_before is not None:
        logging.getLogger(__name__).info("this session runs at nice %d: a browser on this machine keeps its CPU while "
                                         "an answer streams", settings.session_nice)
    atexit.register(engines.close)  # any other way out still stops the engines
    stop = StopSignals()
    if settings.start_at_launch:
        engines.expect_start(registry.get(name))
    service = ChatService(registry, engines, settings)
    demo = build_app(service, default_model=name)
    if settings.start_at_launch:
        start_at_launch(demo, engines, registry.get(name))
    host = args.host or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = args.port or int(os.environ.get("GRADIO_SERVER_PORT") or 7860)
    try:
        try:
            demo.launch(server_name=host, server_port=port, prevent_thread_lock=True, **launch_kwargs(settings, service, host))
        except (ValueError, OSError) as exc:  # Gradio's own check that the page answers, a port in use
            raise VlmDemoError(f"the page did not come up on {host}:{port}: {exc}") from None
        stop.wait()
    finally:
        _stop_serving(demo, engines, settings, nice_before)
    _leave()
    return 0  # (not reached)


def _leave() -> None:
    """End the process once the stop is done (the page closed, the engines and every process of ours ended, the log
    written): Python's own exit would then wait for the worker threads still in their calls, and an engine's start
    caught by the stop waits seconds in its thread for the engine it no longer has (the exit test: 5.2 s where the
    stop took 1.8)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


def start_at_launch(demo, engines, spec) -> None:
    """Start ``spec``'s engine as the page comes up, in the page server's event loop (where every request uses the
    engines), without holding the page up: Gradio runs its app's start-up events once the server listens."""
    async def start() -> None:
        engines.start_soon(spec)

    demo.extra_startup_events.append(start)


class StopSignals:
    """Records SIGTERM and SIGINT instead of raising them anywhere in the main thread, so the app stops in
    order, once, after the signal (one that comes while the page starts is acted on once it is up)."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first stop signal's number, None until one comes."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._record)

    def _record(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum

    def wait(self) -> int:
        """Block until a stop signal comes; its number."""
        while self.received is None:
            time.sleep(0.1)
        return self.received


def _stop_serving(demo, engines, settings: Settings, nice_before: int | None = None) -> None:
    """Stop the app in order: the page takes no new requests (Gradio's queue and listening socket close; the
    server then waits for open requests), the engines shut down, which ends answers still streaming, and the
    server's thread ends, all within ``settings.stop_grace_s``; a process of ours still running
    after that (an engine caught starting) is killed, so none outlives the app. One deadline for all: the page's
    server is not waited for past it (a client that keeps a connection open held it to its own bound: 5 s and more
    in all). The session's nice value goes back to ``nice_before`` first: at nice 19 on a machine busy with other
    sessions' work, the stop got about 1.5% of the CPU and took a minute (CI: 65.7 s); the session yields to a
    browser while answers stream, not while it ends."""
    import psutil

    from .engine.processes import descendants, session_nice

    log = logging.getLogger(__name__)
    log.info("stopping: closing the page, shutting the engines down")
    t0 = time.perf_counter()
    if nice_before is not None:
        session_nice(nice_before)
    closing = threading.Thread(target=demo.close, kwargs={"verbose": False}, name="gradio-close", daemon=True)
    closing.start()
    deadline = t0 + settings.stop_grace_s
    engines.close(settings.stop_grace_s)
    closing.join(max(0.0, deadline - time.perf_counter()))
    for pid in descendants():  # Python's resource tracker aside: it ends after us, once it has cleaned up
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    log.info("stopped in %.1f s", time.perf_counter() - t0)


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``docker stop``) a normal exit, so the atexit hook stops the engines: by
    default SIGTERM ends Python without running atexit, and the engine processes were left running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model to select at start (default: first tiny model on CPU, "
                        "first real one on GPU; env VLM_DEMO_MODEL)")
    parser.add_argument("--host", help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env GRADIO_SERVER_PORT; default 7860)")
