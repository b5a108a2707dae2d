"""The command line's arguments and entry points: the parser of every command, what the arguments alone refuse
(before any library loads), the libraries' warnings kept out of what a person reads, and ``main``: one stderr line for
an error, exit 1."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from .. import serving
from ..errors import InputError, VlmDemoError
from ..settings import DOCUMENT_DPI, DOCUMENT_DPI_RANGE, Settings
from .commands import DEFAULT_PICTURE, cmd_audit, cmd_chat, cmd_inspect, cmd_models
from .reading import cmd_ground, cmd_read


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
    parser.add_argument("--audio", action="append",
                        help="audio clip (wav, flac, ogg/opus, mp3, m4a/aac, webm); models that take audio (repeat "
                        "for several)")
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
    from ..intake.documents import check_dpi, is_document_name, page_numbers
    from ..intake.urls import is_document_url

    if getattr(args, "dpi", None) is not None:
        check_dpi(args.dpi)
    if getattr(args, "pages", None):
        page_numbers(args.pages, count=sys.maxsize, limit=sys.maxsize, name="--pages")  # (its form: 1-3,7)
    video = {k: v for k, v in (("num_frames", getattr(args, "num_frames", None)), ("fps", getattr(args, "fps", None)))
             if v is not None}
    if video:
        from ..service.checks import check_media_io

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
    if getattr(args, "each_page", False) and not any(
            is_document_name(p) or is_document_url(p) for p in args.image or []):
        raise InputError("--each-page reads a document's pages one request each: give a PDF with --image")
    for flag in ("image", "image_embeds", "video", "audio"):
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
