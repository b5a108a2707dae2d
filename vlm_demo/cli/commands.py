"""The commands that ask the chat service: ``models``, ``inspect``, ``chat`` and ``audit``, and what they share (the
request the arguments make, a service of their own, stdout kept for the one JSON object)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

from .. import profile, serving
from ..errors import InputError, VlmDemoError
from ..registry import AUTO, Registry
from ..settings import Settings


DEFAULT_PICTURE = Path(__file__).resolve().parents[2] / "assets" / "bar-chart.png"
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
        family = spec.family if spec.family != AUTO else f"auto: {profile.resolve(spec).adapter.name}"
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
    """The registry (with the model a directory or an endpoint names) and the one request the arguments ask for
    (``service.ask_request``, as every front end makes it)."""
    from ..service import Ask, Source, ask_request

    registry = _registry(settings)
    model = args.model
    if args.endpoint:
        spec = profile.spec_for_endpoint(registry, args.endpoint, model, args.family, args.api_key_env)
        registry, model = registry.with_model(spec), spec.name
    elif Path(model).is_dir():
        spec = profile.spec_for_directory(registry, Path(model), trust_remote_code=args.trust_remote_code,
                                          max_model_len=args.max_model_len)
        registry, model = registry.with_model(spec), spec.name
    sources = (*(Source(p, "file", "image") for p in args.image or []),
               *(Source(p, "file", "image_embeds") for p in args.image_embeds or []),
               *(Source(p, "file", "video") for p in args.video or []),
               *(Source(p, "file", "audio") for p in getattr(args, "audio", None) or []))
    ask = Ask(model=model, text=args.text, sources=sources, system=args.system or "",
              settings=json.loads(args.mm_kwargs) if args.mm_kwargs else {},  # (a JSON object: ``check_arguments``)
              sampling={"max_tokens": args.max_tokens} if getattr(args, "max_tokens", None) else {},
              video={k: v for k, v in (("num_frames", args.num_frames), ("fps", args.fps)) if v is not None},
              pages=args.pages or "", dpi=args.dpi or 0, each_page=getattr(args, "each_page", False))
    models = profile.Profiles(registry)  # (the request's model resolved once: the service gets these)
    return models, asyncio.run(ask_request(ask, models, settings))


async def _with_service(models: Registry | profile.Profiles, settings: Settings, run, engine: bool = True):
    """``run(service)`` with a service of its own over ``models`` (a registry, or the profiles ``_request`` resolved);
    ``engine``: the request starts an engine (its processes' imports begin at once, beside the request's own
    work)."""
    from ..engine import EngineManager
    from ..service import ChatService

    engines = EngineManager(settings)
    if engine:
        engines.warm()
    try:
        models = profile.Profiles.of(models)
        return await run(ChatService(models.registry, engines, settings, models))
    finally:
        engines.shutdown_all()


def page_json(page) -> dict:
    """One page's answer (``PageAnswer``) as the JSON the command line prints: its figures beside its words."""
    fields = dataclasses.asdict(page)
    return {**{k: v for k, v in fields.items() if k != "figures"},
            **{k: fields["figures"][k] for k in ("tokens", "ttft_s", "tokens_per_s")}}


def cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    """Render one request with the engine and print the inspection."""
    from ..inspector import report_text, to_json

    models, request = _request(args, settings)
    out = _stdout_to_stderr() if args.json else sys.stdout
    # Rendering needs vLLM's renderer only: no engine process starts (as ``vllm serve``'s own render).
    async def run(service):
        return await service.inspect(request, start_engine=False), await service.controls(request.model)
    inspection, found = asyncio.run(_with_service(models, settings, run, engine=False))
    if args.json:
        out.write(json.dumps({**to_json(inspection), "controls": controls_json(found)}) + "\n")
        out.flush()
        return 0
    print(report_text(inspection))
    return 0


def cmd_chat(args: argparse.Namespace, settings: Settings) -> int:
    """Render one request and stream the answer."""
    from ..service import Delta, Done, Failed

    models, request = _request(args, settings)
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

    done = asyncio.run(_with_service(models, settings, run))
    figures = done.figures
    if args.json:
        pages = {"pages": [page_json(p) for p in done.pages], "total_s": figures.total_s} if done.pages else {}
        out.write(json.dumps({"model": request.model, "text": done.answer, "num_tokens": figures.tokens,
                              "ttft_s": figures.ttft_s, "tokens_per_s": figures.tokens_per_s,
                              "finish_reason": figures.finish_reason, "reasoning": done.reasoning,
                              "reasoning_tokens": figures.reasoning_tokens, **pages}) + "\n")
    else:
        if done.pages:  # the pages' answers streamed together: each printed whole, in page order
            out.write(done.answer + f"\n\n[{len(done.pages)} pages, each on its own: the last done at "
                      f"{figures.total_s:.1f} s, {len(done.pages) / figures.total_s:.2f} pages/s]")
        reasoning = f" ({figures.reasoning_tokens} reasoning)" if figures.reasoning_tokens else ""
        out.write(f"\n[{figures.tokens} tokens{reasoning}, ttft {figures.ttft_s:.3f} s, {figures.tokens_per_s:.1f} "
                  "tokens/s]\n")
    out.flush()
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


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Audit a server: its render of the request (or, with --sweep, of each control's extremes and one and two
    pictures) against vLLM's reference renderer of the checkpoint. Exit 0 equal, 1 differs, 2 could not check
    (a bad argument too: a deployment's CI tells "differs" from "not run")."""
    from ..inspector.verdict import EXIT_CODES, UNCHECKED

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
    from ..engine import EngineManager
    from ..service.audit import Auditor

    if args.sweep or not (args.image or args.video):
        args.image = (args.image or [str(DEFAULT_PICTURE)])[:1 if args.sweep else None]
    models, request = _request(args, settings)
    args.out = _stdout_to_stderr() if args.json else sys.stdout
    engines = EngineManager(settings)
    auditor = Auditor.of(models.registry, request.model, engines, settings, args.reference,
                         trust_remote_code=args.trust_remote_code or None, profiles=models)

    async def run():
        if args.sweep:
            return await auditor.sweep(request.turns[-1].media["image"][0])
        return [("the request", await auditor.audit(request))]
    try:
        return asyncio.run(run())
    finally:
        engines.shutdown_all()
