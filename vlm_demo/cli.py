"""Command line: ``python -m vlm_demo {serve,models}`` and ``python app.py``."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

from .errors import InputError, VlmDemoError
from . import profile
from .registry import AUTO, Registry
from .settings import Settings


def _registry(settings: Settings) -> Registry:
    return profile.load_registry(settings.models_file)


def controls_json(found: profile.Profile) -> list[dict[str, object]]:
    """A model's controls as JSON: name, kind, range and step (sliders), where each starts, and whence."""
    source = found.controls_source
    return [{"kwarg": c.kwarg, "kind": c.kind, **({"min": c.min, "max": c.max, "step": c.step} if c.kind == "int" else {}),
             "initial": found.initial(c.kwarg), "sent_until_moved": c.default is not None, "from": source}
            for c in found.controls]


def cmd_models(args: argparse.Namespace, settings: Settings) -> int:
    """Print the registry, one model a line; with ``--controls NAME`` (a registry name or a model directory), that
    model's controls, one a line (derived from its processor where its entry offers none)."""
    registry = _registry(settings)
    if args.controls:
        name = args.controls
        if Path(name).is_dir():
            spec = profile.spec_for_directory(registry, Path(name))
            registry, name = registry.with_model(spec), spec.name
        found = asyncio.run(_with_service(registry, settings, lambda service: service.controls(name)))
        rows = controls_json(found)
        for c in rows:
            shape = "true/false" if c["kind"] == "bool" else f"{c['min']}..{c['max']} step {c['step']}"
            print(f"{c['kwarg']:28} {shape:32} starts at {c['initial']}  ({c['from']})")
        if not rows:
            print(f"{name} offers no per-request processor settings")
        return 0
    for spec in registry.models:
        source = spec.repo or spec.path or (f"{spec.served_model_name} at {spec.endpoint}" if spec.remote
                                            else f"tiny {spec.family} (built offline)")
        controls = ", ".join(f"{c.kwarg}=true/false" if c.kind == "bool" else f"{c.kwarg}={c.min}..{c.max}"
                             for c in spec.controls) or "-"
        family = spec.family if spec.family != AUTO else f"auto: {profile.adapter(spec).name}"
        print(f"{spec.name:22} {spec.display_label:40} {source:36} family: {family:16} controls: {controls}")
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the Gradio page until SIGTERM (``kill``, ``docker stop``) or SIGINT (Ctrl-C), then stop in
    order (``_stop_serving``) and exit with status 0: the stop was asked for and done, nothing failed (128 +
    the signal's number is what a shell reports for a process the signal killed, which this one is not)."""
    from .engine import EngineManager, has_gpu
    from .service import ChatService
    from .ui.app import build_app, launch_kwargs

    registry = _registry(settings)
    name = args.model or os.environ.get("VLM_DEMO_MODEL") or registry.default(has_gpu()).name
    registry.get(name)  # unknown names fail here, before the server starts
    engines = EngineManager(settings)
    atexit.register(engines.shutdown_all)  # any other way out still stops the engines
    stop = StopSignals()
    demo = build_app(ChatService(registry, engines, settings), default_model=name)
    host = args.host or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = args.port or int(os.environ.get("GRADIO_SERVER_PORT") or 7860)
    try:
        demo.launch(server_name=host, server_port=port, prevent_thread_lock=True, **launch_kwargs(settings))
        stop.wait()
    finally:
        _stop_serving(demo, engines, settings)
    return 0


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


def _stop_serving(demo, engines, settings: Settings) -> None:
    """Stop the app in order: the page takes no new requests (Gradio's queue and listening socket close; the
    server then waits for open requests), the engines shut down, which ends answers still streaming, and the
    server's thread ends. Each step is bounded by ``settings.stop_grace_s``; a process of ours still running
    after that (an engine caught starting) is killed, so none outlives the app."""
    import psutil

    from .engine.local import _descendants

    log = logging.getLogger(__name__)
    log.info("stopping: closing the page, shutting the engines down")
    t0 = time.perf_counter()
    closing = threading.Thread(target=demo.close, kwargs={"verbose": False}, name="gradio-close", daemon=True)
    closing.start()
    engines.shutdown_all(settings.stop_grace_s)
    closing.join(settings.stop_grace_s)
    for pid in _descendants():  # Python's resource tracker aside: it ends after us, once it has cleaned up
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    log.info("stopped in %.1f s", time.perf_counter() - t0)


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``docker stop``) a normal exit, so the atexit hook stops the engines: by
    default SIGTERM ends Python without running atexit, and the engine processes were left running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _stdout_to_stderr():
    """Send everything written to stdout (vLLM's logs, its engine process) to stderr; return a
    file on the real stdout for the one JSON object."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(real, "w")


def _request(args: argparse.Namespace, settings: Settings):
    from .media import load_image, load_image_embeds, load_video
    from .registry import Sampling
    from .service import ChatRequest, Turn

    registry = _registry(settings)
    model = args.model
    if args.endpoint:
        spec = profile.spec_for_endpoint(registry, args.endpoint, model, args.family, args.api_key_env)
        registry, model = registry.with_model(spec), spec.name
    elif Path(model).is_dir():
        spec = profile.spec_for_directory(registry, Path(model), trust_remote_code=args.trust_remote_code,
                                          max_model_len=args.max_model_len)
        registry, model = registry.with_model(spec), spec.name
    try:
        mm_kwargs = json.loads(args.mm_kwargs) if args.mm_kwargs else {}
    except ValueError as exc:
        raise InputError(f"--mm-kwargs is not JSON: {exc}") from None
    if not isinstance(mm_kwargs, dict):
        raise InputError("--mm-kwargs must be a JSON object, e.g. '{\"max_pixels\": 401408}'")
    from .registry import flat_kwargs

    from .fetch import is_url, load_image_url, load_video_url

    images = (*(asyncio.run(load_image_url(p, settings)) if is_url(p) else load_image(Path(p), settings)
                for p in args.image or []),
              *(load_image_embeds(Path(p), settings) for p in args.image_embeds or []))
    videos = tuple(asyncio.run(load_video_url(p, settings)) if is_url(p) else load_video(Path(p), settings)
                   for p in args.video or [])
    video_io = {k: v for k, v in (("num_frames", args.num_frames), ("fps", args.fps)) if v is not None}
    media = {m: items for m, items in (("image", images), ("video", videos)) if items}
    spec = registry.get(model)
    mm_kwargs = profile.profile(spec).control_names(flat_kwargs(mm_kwargs))  # size.longest_edge: max_pixels
    sampling = spec.sampling
    if getattr(args, "max_tokens", None):
        sampling = Sampling(**{**sampling.__dict__, "max_tokens": args.max_tokens})
    request = ChatRequest(model=model, turns=(Turn("user", args.text, media),), system=args.system or "",
                          mm_kwargs=mm_kwargs, sampling=sampling, media_io={"video": video_io} if video_io else {})
    return registry, request


async def _with_service(registry: Registry, settings: Settings, run):
    from .engine import EngineManager
    from .service import ChatService

    engines = EngineManager(settings)
    try:
        return await run(ChatService(registry, engines, settings))
    finally:
        engines.shutdown_all()


def cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    """Render one request with the engine and print the inspection."""
    from .inspector import run_length_text, to_json

    registry, request = _request(args, settings)
    out = _stdout_to_stderr() if args.json else sys.stdout
    # Rendering needs vLLM's renderer only: no engine process starts (as ``vllm serve``'s own render).
    async def run(service):
        return await service.inspect(request, start_engine=False), await service.controls(request.model)
    inspection, found = asyncio.run(_with_service(registry, settings, run))
    if args.json:
        out.write(json.dumps({**to_json(inspection), "controls": controls_json(found)}) + "\n")
        out.flush()
        return 0
    b = inspection.budget
    print(f"model: {inspection.model}   family: {inspection.family}   content format: {inspection.content_format}")
    print(f"--- rendered prompt ---\n{inspection.prompt}\n--- expanded tokens ---")
    print(run_length_text(inspection))
    media = "".join(f"{n} {m} + " for m, n in b.media_tokens.items())
    print(f"--- budget: {b.total} tokens = {media}{b.text_tokens} text, of max_model_len {b.max_model_len}")
    if inspection.geometry_note:
        print(f"--- {inspection.geometry_note}: counts, ids and ranges are vLLM's")
    for e in inspection.expansions():
        grid = f" grid {e.grid[0]}x{e.grid[1]}" if e.grid else ""
        thumb = " + thumbnail" if e.thumbnail else ""
        print(f"{e.modality} {e.index}: {e.count} x {e.placeholder!r} token {e.token_id} at "
              f"[{e.offset}, {e.offset + e.length}) size {e.orig_size} -> {e.processed_size}{grid}{thumb}")
        if e.modality == "video":
            times = ", ".join(f"{t:.2f}" for t in e.timestamps_s or ())
            print(f"  {e.num_frames} frames sampled (at {times} s); groups of tokens: {list(e.groups or ())}"
                  + (f", {e.frames_per_group} frames each" if e.frames_per_group else ""))
    return 0


def cmd_chat(args: argparse.Namespace, settings: Settings) -> int:
    """Render one request and stream the answer."""
    from .service import Delta, Done, Failed

    registry, request = _request(args, settings)
    out = _stdout_to_stderr() if args.json else sys.stdout

    async def run(service):
        shown = 0  # reasoning characters printed so far
        async for event in service.chat(request):
            if isinstance(event, Failed):
                raise InputError(event.message)
            if isinstance(event, Delta) and not args.json:
                out.write(chat_text(event, shown))
                out.flush()
                shown = len(event.reasoning)
            if isinstance(event, Done):
                return event
        return None

    done = asyncio.run(_with_service(registry, settings, run))
    if args.json:
        out.write(json.dumps({"model": request.model, "text": done.answer, "num_tokens": done.num_tokens,
                              "ttft_s": done.ttft_s, "tokens_per_s": done.tokens_per_s,
                              "finish_reason": done.finish_reason, "reasoning": done.reasoning,
                              "reasoning_tokens": done.reasoning_tokens}) + "\n")
    else:
        reasoning = f" ({done.reasoning_tokens} reasoning)" if done.reasoning_tokens else ""
        out.write(f"\n[{done.num_tokens} tokens{reasoning}, ttft {done.ttft_s:.3f} s, {done.tokens_per_s:.1f} tokens/s]\n")
    out.flush()
    return 0


def cmd_ground(args: argparse.Namespace, settings: Settings) -> int:
    """Boxes and points of an answer in the image's own pixels: ``--answer`` reads a given answer against the
    image as the model's processor sees it (no generation); ``--text`` asks the model in Detect mode."""
    from .grounding import place, to_json
    from .service import Done, Failed, Rendered, detect_request, grounding_of

    if (args.text is None) == (args.answer is None):
        raise InputError("give --text (what to find) or --answer (an answer to read), one of them")
    if len(args.image or []) != 1:
        raise InputError("ground takes exactly one --image")
    args.text = args.text if args.text is not None else ""
    registry, request = _request(args, settings)
    spec = registry.get(request.model)
    grounding = grounding_of(spec)
    out = _stdout_to_stderr() if args.json else sys.stdout

    async def run(service):
        if args.answer is not None:
            return await service.inspect(request, start_engine=False), args.answer
        inspection = None
        async for event in service.chat(detect_request(request, spec, args.text)):
            if isinstance(event, Failed):
                raise InputError(event.message)
            if isinstance(event, Rendered):
                inspection = event.inspection
            if isinstance(event, Done):
                return inspection, event.answer
        raise InputError("the answer did not finish")

    inspection, answer = asyncio.run(_with_service(registry, settings, run))
    image = inspection.items["image"][-1]  # boxes refer to the last image
    placed = place(grounding.parse(answer), grounding, image.orig_size, image.processed_size)
    if args.json:
        out.write(json.dumps(to_json(spec.name, grounding, image.orig_size, image.processed_size, placed)) + "\n")
        out.flush()
        return 0
    size = f"{image.orig_size[0]}x{image.orig_size[1]}"
    processed = f" (processed {image.processed_size[0]}x{image.processed_size[1]})" if image.processed_size else ""
    print(f"format: {grounding.name} · image {size}{processed}\nanswer: {answer}")
    for item in placed:
        where = " ".join(f"{v:.1f}" for v in (item.box or item.point or ()))
        print(f"{'box' if item.box else 'point'} {item.label!r}: {where}")
    return 0


def chat_text(delta, shown: int) -> str:
    """What ``chat`` prints for one ``Delta``, ``shown`` reasoning characters having been printed: new
    reasoning after a "[reasoning]" line, and answer text, after an "[answer]" line where reasoning came first."""
    text = ""
    if len(delta.reasoning) > shown:
        text += ("[reasoning]\n" if shown == 0 else "") + delta.reasoning[shown:]
    if delta.text:
        if delta.reasoning and delta.answer == delta.text:  # the answer's first text, after the reasoning
            text += "\n[answer]\n"
        text += delta.text
    return text


def _add_request_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="registry name, a local model directory, or with --endpoint the served model name")
    parser.add_argument("--endpoint", help="base URL of a remote OpenAI-compatible vLLM server, e.g. "
                        "http://gpu-box:8000 or http://gpu-box:8000/v1 (vllm serve, Ray Serve LLM)")
    parser.add_argument("--family", help="with --endpoint: the model's family adapter when the served name is not "
                        "in models.yaml (default: generic, everything from the server)")
    parser.add_argument("--api-key-env", help="with --endpoint: environment variable holding the server's API key")
    parser.add_argument("--image", action="append",
                        help="image file or URL: data:, or http(s) when VLM_DEMO_URL_FETCH allows (repeat for several)")
    parser.add_argument("--image-embeds", action="append",
                        help="precomputed image embeddings, .safetensors with 'image_embeds' [tokens, hidden] "
                        "(and 'image_grid_thw' for Qwen2.5-VL); LLaVA-1.5 and Qwen2.5-VL")
    parser.add_argument("--video", action="append",
                        help="video file (mp4, webm, mov, mkv) or URL (data:video/..., or http(s) as for images); "
                        "models that take video (repeat for several)")
    parser.add_argument("--num-frames", type=int, help="frames vLLM samples from each video (its default: 32)")
    parser.add_argument("--fps", type=float, help="frames per second vLLM samples from each video (with "
                        "--num-frames, whichever gives fewer)")
    parser.add_argument("--text", required=True, help="the question")
    parser.add_argument("--system", help="system prompt")
    parser.add_argument("--mm-kwargs", help='image-processor kwargs as JSON, e.g. \'{"max_pixels": 401408}\'')
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--trust-remote-code", action="store_true", help="for a local model directory")
    parser.add_argument("--max-model-len", type=int, help="for a local model directory")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vlm_demo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the Gradio page (what python app.py does)")
    add_serve_args(serve)
    serve.set_defaults(func=cmd_serve)
    models = sub.add_parser("models", help="list the models of models.yaml")
    models.add_argument("--controls", metavar="NAME", help="list this model's controls (a name or a model directory)")
    models.set_defaults(func=cmd_models)
    inspect = sub.add_parser("inspect", help="show the rendered prompt and the image-token expansion")
    _add_request_args(inspect)
    inspect.set_defaults(func=cmd_inspect)
    chat = sub.add_parser("chat", help="stream an answer (with --json: one object at the end)")
    _add_request_args(chat)
    chat.add_argument("--max-tokens", type=int, help="most tokens to generate")
    chat.set_defaults(func=cmd_chat)
    ground = sub.add_parser("ground", help="boxes and points of an answer, in the image's pixels (--answer: "
                            "read a given answer; --text: ask the model in Detect mode)")
    _add_request_args(ground)
    for action in ground._actions:
        if action.dest == "text":
            action.required, action.help = False, "what to find (Detect mode: the model answers in its box format)"
    ground.add_argument("--answer", help="an answer to read (from this app or anywhere else); nothing is generated")
    ground.add_argument("--max-tokens", type=int, help="most tokens to generate (with --text)")
    ground.set_defaults(func=cmd_ground)
    return parser


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model to select at start (default: first tiny model on CPU, "
                        "first real one on GPU; env VLM_DEMO_MODEL)")
    parser.add_argument("--host", help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env GRADIO_SERVER_PORT; default 7860)")


LIBRARY_MODULES = r"(transformers|vllm|torch|torchvision|gradio|gradio_client|huggingface_hub|cv2)(\..*)?$"
"""Modules whose warnings are theirs to fix, not a person's to read (transformers' deprecation of Qwen's
``min_pixels``/``max_pixels`` call kwargs, which vLLM 0.32's Qwen3-VL processing still passes beside the ``size``
the app sends)."""


def quiet_library_warnings() -> None:
    """Keep the libraries' FutureWarning, DeprecationWarning and UserWarning out of what a person reads (the
    CLI's stderr, the app's log), and transformers' logged notices below errors; a ``-W`` option or
    ``PYTHONWARNINGS`` (``TRANSFORMERS_VERBOSITY``) of the user's still decides."""
    if "TRANSFORMERS_VERBOSITY" not in os.environ:  # its notices (logged, not warned), here and in vLLM's processes
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
    if sys.warnoptions:
        return
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
    # vLLM's engine processes run library code alone: they start without this process's filters
    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning,ignore::DeprecationWarning,ignore::UserWarning"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_library_warnings()
    if args.command in ("inspect", "chat", "ground", "models"):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # before vLLM is imported
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.__stderr__")  # stdout is the command's output
    logging.basicConfig(level=logging.WARNING if args.command != "serve" else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args, Settings.from_env())
    except VlmDemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        # Stopped engines are collected now, while the modules their finalizers use still exist (vLLM 0.32's
        # AsyncLLM.__del__ otherwise runs at interpreter teardown and prints a TypeError traceback). What is
        # left is frozen: interpreter teardown then skips another scan of the whole heap (torch, vLLM,
        # Gradio), which took 5-20 s on a busy 2-core machine.
        if args.command != "serve":  # serve has shut its engines down itself (``_stop_serving``)
            gc.collect()
        gc.freeze()


def serve_main(argv: list[str] | None = None) -> int:
    """``python app.py``: the serve command's flags only."""
    return main(["serve", *sys.argv[1:]] if argv is None else ["serve", *argv])
