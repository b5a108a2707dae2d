"""Command line: ``python -m vlm_demo {serve,models,inspect,chat,ground,read,audit}`` and ``python app.py`` (its serve
command in ``serving``): arguments in, a request to the chat service, its answer out; errors as one stderr line."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from .errors import InputError, VlmDemoError
from . import profile, serving
from .registry import AUTO, Registry
from .settings import DOCUMENT_DPI, DOCUMENT_DPI_RANGE, Settings

DEFAULT_PICTURE = Path(__file__).resolve().parent.parent / "assets" / "bar-chart.png"
"""The picture ``audit`` sends when none is given."""


def _registry(settings: Settings) -> Registry:
    return serving.load_registry(settings)


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
            fixed = found.adapter.fixed_geometry
            print(f"{name} offers no per-request processor settings" + (f": {fixed}" if fixed else ""))
        return 0
    for spec in registry.models:
        source = spec.repo or spec.path or (f"{spec.served_model_name} at {spec.endpoint}" if spec.remote
                                            else f"tiny {spec.family} (built offline)")
        controls = ", ".join(f"{c.kwarg}=true/false" if c.kind == "bool" else f"{c.kwarg}={c.min}..{c.max}"
                             for c in spec.controls) or "-"
        family = spec.family if spec.family != AUTO else f"auto: {profile.adapter(spec).name}"
        print(f"{spec.name:22} {spec.display_label:40} {source:36} family: {family:16} controls: {controls}")
    return 0


def _stdout_to_stderr():
    """Send everything written to stdout (vLLM's logs, its engine process) to stderr; return a
    file on the real stdout for the one JSON object."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(real, "w")


def _request(args: argparse.Namespace, settings: Settings):
    from . import intake
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
    mm_kwargs = json.loads(args.mm_kwargs) if args.mm_kwargs else {}  # (a JSON object: ``check_arguments``)
    from .registry import flat_kwargs

    spec = registry.get(model)
    sources = [*((p, "image") for p in args.image or []), *((p, "image_embeds") for p in args.image_embeds or []),
               *((p, "video") for p in args.video or [])]
    documents = intake.DocumentOptions(dpi=args.dpi or profile.adapter(spec).document_dpi or DOCUMENT_DPI,
                                       pages=args.pages or "")
    media = intake.by_modality(asyncio.run(intake.load_all(sources, settings, documents)))
    video_io = {k: v for k, v in (("num_frames", args.num_frames), ("fps", args.fps)) if v is not None}
    mm_kwargs = profile.profile(spec).control_names(flat_kwargs(mm_kwargs))  # size.longest_edge: max_pixels
    sampling = spec.sampling
    if getattr(args, "max_tokens", None):
        sampling = Sampling(**{**sampling.__dict__, "max_tokens": args.max_tokens})
    request = ChatRequest(model=model, turns=(Turn("user", args.text, media),), system=args.system or "",
                          mm_kwargs=mm_kwargs, sampling=sampling, media_io={"video": video_io} if video_io else {})
    return registry, request


async def _with_service(registry: Registry, settings: Settings, run, engine: bool = True):
    """``run(service)`` with a service of its own; ``engine``: the request starts an engine (its processes' imports
    begin at once, beside the request's own work)."""
    from .engine import EngineManager
    from .service import ChatService

    engines = EngineManager(settings)
    if engine:
        engines.warm()
    try:
        return await run(ChatService(registry, engines, settings))
    finally:
        engines.shutdown_all()


def cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    """Render one request with the engine and print the inspection."""
    from .inspector import report_text, to_json

    registry, request = _request(args, settings)
    out = _stdout_to_stderr() if args.json else sys.stdout
    # Rendering needs vLLM's renderer only: no engine process starts (as ``vllm serve``'s own render).
    async def run(service):
        return await service.inspect(request, start_engine=False), await service.controls(request.model)
    inspection, found = asyncio.run(_with_service(registry, settings, run, engine=False))
    if args.json:
        out.write(json.dumps({**to_json(inspection), "controls": controls_json(found)}) + "\n")
        out.flush()
        return 0
    print(report_text(inspection))
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

    if args.each_page:
        request = dataclasses.replace(request, each_page=True)
    done = asyncio.run(_with_service(registry, settings, run))
    if args.json:
        pages = {"pages": [dataclasses.asdict(p) for p in done.pages], "total_s": done.total_s} if done.pages else {}
        out.write(json.dumps({"model": request.model, "text": done.answer, "num_tokens": done.num_tokens,
                              "ttft_s": done.ttft_s, "tokens_per_s": done.tokens_per_s,
                              "finish_reason": done.finish_reason, "reasoning": done.reasoning,
                              "reasoning_tokens": done.reasoning_tokens, **pages}) + "\n")
    else:
        if done.pages:  # the pages' answers streamed together: each printed whole, in page order
            out.write(done.answer + f"\n\n[{len(done.pages)} pages, each on its own: the last done at "
                      f"{done.total_s:.1f} s, {len(done.pages) / done.total_s:.2f} pages/s]")
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
    detect = args.text is not None
    args.text = args.text if args.text is not None else ""
    registry, request = _request(args, settings)
    spec = registry.get(request.model)
    grounding = grounding_of(spec, detect=detect)
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

    inspection, answer = asyncio.run(_with_service(registry, settings, run, engine=args.answer is None))
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


def cmd_read(args: argparse.Namespace, settings: Settings) -> int:
    """A document reader's saved answers as cells, per page: each ``--answer`` file is the answer to one page (a
    picture, or a PDF's page), in page order; each page is rendered on its own as the model's processor sees it
    (no generation), and its cells' boxes mapped into the page picture's pixels with the family's format."""
    from .grounding import cells, place
    from .intake import Page, picture
    from .service import Turn, grounding_of

    answers = [_read_answer(path) for path in args.answer]
    registry, request = _request(args, settings)
    spec = registry.get(request.model)
    grounding = grounding_of(spec)
    question = request.turns[-1]
    pages = question.media.get("image", ())
    if not pages or any(picture(page) is None for page in pages):
        raise InputError("read needs the pages as --image: picture files or URLs, or a PDF")
    if len(pages) != len(answers):
        raise InputError(f"{len(pages)} page{'s' * (len(pages) != 1)} but {len(answers)} answer"
                         f"{'s' * (len(answers) != 1)}: give one --answer file per page, in page order")
    split = [dataclasses.replace(request, turns=(Turn("user", question.text, {"image": (page,)}),)) for page in pages]
    out = _stdout_to_stderr() if args.json else sys.stdout

    async def run(service):
        return [await service.inspect(one, start_engine=False) for one in split]

    inspections = asyncio.run(_with_service(registry, settings, run, engine=False))
    read = []
    for n, (page, inspection, answer) in enumerate(zip(pages, inspections, answers, strict=True), 1):
        image = inspection.items["image"][-1]
        found = grounding.parse(answer)
        placed = place(found, grounding, image.orig_size, image.processed_size)
        read.append({"page": page.label if isinstance(page, Page) else f"image {n}",
                     "image_size": list(image.orig_size),
                     "processed_size": list(image.processed_size) if image.processed_size else None,
                     "cells": cells(placed), "left_out": sum(1 for f in found if f.box is not None)
                     - sum(1 for p in placed if p.box is not None)})
    if args.json:
        out.write(json.dumps({"model": spec.name, "format": grounding.name, "pages": read}) + "\n")
        out.flush()
        return 0
    print(f"format: {grounding.name}")
    for page in read:
        processed = " (processed {}x{})".format(*page["processed_size"]) if page["processed_size"] else ""
        left_out = f", {page['left_out']} outside the picture left out" if page["left_out"] else ""
        print(f"{page['page']}: {page['image_size'][0]}x{page['image_size'][1]}{processed}, "
              f"{len(page['cells'])} cell{'s' * (len(page['cells']) != 1)}{left_out}")
        for cell in page["cells"]:
            text = (cell["text"] or "").replace("\n", " ")
            text = f"  {text[:60]}…" if len(text) > 60 else f"  {text}" if text else ""
            print(f"  {cell['order'] or '-'} {cell['category']} [{', '.join(f'{v:g}' for v in cell['box'])}]{text}")
    return 0


def _read_answer(path: str) -> str:
    """A saved answer: the file's text ("-": standard input)."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the answer {path}: {getattr(exc, 'strerror', None) or exc}") from None


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Audit a server: its render of the request (or, with --sweep, of each control's extremes and one and two
    pictures) against vLLM's reference renderer of the checkpoint. Exit 0 equal, 1 differs, 2 could not check
    (a bad argument too: a deployment's CI tells "differs" from "not run")."""
    from .inspector.audit import EXIT_CODES, UNCHECKED

    try:
        results = _audit(args, settings)
    except VlmDemoError as exc:
        print(f"could not check: {exc}", file=sys.stderr)
        return EXIT_CODES[UNCHECKED]
    if args.json:
        args.out.write(json.dumps([{"case": label, **v.to_json(), "exit_code": v.exit_code}
                                   for label, v in results]) + "\n")
        args.out.flush()
    else:
        for label, v in results:
            print(f"{label}: {v.text()}" if args.sweep else v.text())
    return max(v.exit_code for _, v in results)


def _audit(args: argparse.Namespace, settings: Settings) -> list:
    from .engine import EngineManager
    from .service.audit import Auditor

    if args.sweep or not (args.image or args.video):
        args.image = (args.image or [str(DEFAULT_PICTURE)])[:1 if args.sweep else None]
    registry, request = _request(args, settings)
    args.out = _stdout_to_stderr() if args.json else sys.stdout
    engines = EngineManager(settings)
    auditor = Auditor.of(registry, request.model, engines, settings, args.reference,
                         trust_remote_code=args.trust_remote_code or None)

    async def run():
        if args.sweep:
            return await auditor.sweep(request.turns[-1].media["image"][0])
        return [("the request", await auditor.audit(request))]
    try:
        return asyncio.run(run())
    finally:
        engines.shutdown_all()


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
                        help="image file or URL: data:, or http(s) when VLM_DEMO_URL_FETCH allows (repeat for several); "
                        "a PDF file gives its pages (--pages, --dpi)")
    parser.add_argument("--pages", help="which pages of each PDF, from 1: e.g. 1-3,7 (default: all, up to "
                        "VLM_DEMO_MAX_DOCUMENT_PAGES)")
    parser.add_argument("--dpi", type=int, help=f"resolution a PDF's pages are rasterised at, "
                        f"{DOCUMENT_DPI_RANGE[0]}-{DOCUMENT_DPI_RANGE[1]} (default: the model family's, else "
                        f"{DOCUMENT_DPI})")
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
    parser.add_argument("--trust-remote-code", action="store_true", help="run the checkpoint's own code: for a local "
                        "model directory, or with --endpoint for the reference renderer of the model it serves")
    parser.add_argument("--max-model-len", type=int, help="for a local model directory")


def _amend(parser: argparse.ArgumentParser, dest: str, **fields: object) -> None:
    """Change a shared request argument for one command (``required``, ``default``, ``help``)."""
    for action in parser._actions:
        if action.dest == dest:
            for name, value in fields.items():
                setattr(action, name, value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vlm_demo", description="Chat with vision-language models "
                                     "served by vLLM and see what the engine receives.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the Gradio page (what python app.py does)")
    serving.add_serve_args(serve)
    serve.set_defaults(func=serving.cmd_serve)
    models = sub.add_parser("models", help="list the models of models.yaml")
    models.add_argument("--controls", metavar="NAME", help="list this model's controls (a name or a model directory)")
    models.set_defaults(func=cmd_models)
    inspect = sub.add_parser("inspect", help="show the rendered prompt and the image-token expansion")
    _add_request_args(inspect)
    inspect.set_defaults(func=cmd_inspect)
    chat = sub.add_parser("chat", help="stream an answer (with --json: one object at the end)")
    _add_request_args(chat)
    chat.add_argument("--max-tokens", type=int, help="most tokens to generate")
    chat.add_argument("--each-page", action="store_true", help="ask about each page of the PDFs on its own: one "
                      "request per page, sent together (the engine batches them); printed in page order at the end")
    chat.set_defaults(func=cmd_chat)
    ground = sub.add_parser("ground", help="boxes and points of an answer, in the image's pixels (--answer: "
                            "read a given answer; --text: ask the model in Detect mode)")
    _add_request_args(ground)
    _amend(ground, "text", required=False, help="what to find (Detect mode: the model answers in its box format)")
    ground.add_argument("--answer", help="an answer to read (from this app or anywhere else); nothing is generated")
    ground.add_argument("--max-tokens", type=int, help="most tokens to generate (with --text)")
    ground.set_defaults(func=cmd_ground)
    read = sub.add_parser("read", help="a document reader's saved answers as cells per page: category, text, box in "
                          "the page's pixels, reading order (nothing is generated)")
    _add_request_args(read)
    _amend(read, "text", required=False, default="", help="the question the answers were given to (default: none)")
    _amend(read, "image", help="the pages: picture files or URLs, or a PDF (its pages: --pages, --dpi)")
    read.add_argument("--answer", action="append", required=True, metavar="FILE",
                      help="a saved answer, one per page in page order (repeat); - reads standard input")
    read.set_defaults(func=cmd_read)
    audit = sub.add_parser("audit", help="does a server render what vLLM's reference renderer renders from the "
                           "model's own files? (exit 0 equal, 1 differs, 2 could not check)")
    _add_request_args(audit)
    _amend(audit, "text", required=False, default="What is in this picture?")
    _amend(audit, "endpoint", required=True)
    _amend(audit, "image", help=f"image file or URL (default: {DEFAULT_PICTURE.name})")
    audit.add_argument("--reference", help="the model's files: a directory or a Hub id (config, tokenizer, "
                       "processor and template files only; default: the checkpoint the server names)")
    audit.add_argument("--sweep", action="store_true", help="each control at its smallest, default and largest "
                       "value, and one and two pictures")
    audit.set_defaults(func=cmd_audit)
    return parser


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


def check_arguments(args: argparse.Namespace, settings: Settings) -> None:
    """Refuse what the command line alone shows to be wrong (``InputError``, one line), before any library loads
    (vLLM and transformers take seconds): a dpi or frame rate out of range, pages that are no range, a max_tokens
    under 1, --mm-kwargs that is no JSON object, a file that is not there."""
    from .intake.documents import check_dpi, page_numbers

    if getattr(args, "dpi", None) is not None:
        check_dpi(args.dpi)
    if getattr(args, "pages", None):
        page_numbers(args.pages, count=sys.maxsize, limit=sys.maxsize, name="--pages")  # (its form: 1-3,7)
    video = {k: v for k, v in (("num_frames", getattr(args, "num_frames", None)), ("fps", getattr(args, "fps", None)))
             if v is not None}
    if video:
        from .service.checks import check_media_io

        check_media_io({"video": video}, settings)
    if getattr(args, "max_tokens", None) is not None and args.max_tokens < 1:
        raise InputError(f"--max-tokens must be at least 1 (got {args.max_tokens})")
    if getattr(args, "mm_kwargs", None):
        try:
            found = json.loads(args.mm_kwargs)
        except ValueError as exc:
            raise InputError(f"--mm-kwargs is not JSON: {exc}") from None
        if not isinstance(found, dict):
            raise InputError("--mm-kwargs must be a JSON object, e.g. '{\"max_pixels\": 401408}'")
    for flag in ("image", "image_embeds", "video"):
        for source in getattr(args, flag, None) or []:
            if "://" not in source and not source.startswith("data:") and not Path(source).is_file():
                raise InputError(f"cannot read {source}: No such file or directory")  # (as the intake says it)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_arguments(args, Settings.from_env())
    except VlmDemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    quiet_library_warnings()
    if args.command in ("inspect", "chat", "ground", "read", "models", "audit"):
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
    except BrokenPipeError:  # the reader went away (``| head``): the rest of the output has nowhere to go
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor has Python's flush at exit
        return 141  # 128 + SIGPIPE, as a shell reports a pipe's writer that stopped so
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
