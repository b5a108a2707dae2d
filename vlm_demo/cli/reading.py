"""The commands that read an answer's boxes and cells: ``ground`` (boxes and points in the picture's pixels, of a given
answer or of the model's in Detect mode) and ``read`` (a document reader's saved answers as cells per page)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from ..errors import InputError
from ..settings import Settings
from .commands import _request, _stdout_to_stderr, _with_service


def cmd_ground(args: argparse.Namespace, settings: Settings) -> int:
    """Boxes and points of an answer in the image's own pixels: ``--answer`` reads a given answer against the
    image as the model's processor sees it (no generation); ``--text`` asks the model in Detect mode."""
    from ..grounding import place, to_json
    from ..service import Done, Failed, Rendered, detect_request, grounding_of

    if (args.text is None) == (args.answer is None):
        raise InputError("give --text (what to find) or --answer (an answer to read), one of them")
    if len(args.image or []) != 1:
        raise InputError("ground takes exactly one --image")
    detect = args.text is not None
    args.text = args.text if args.text is not None else ""
    models, request = _request(args, settings)
    found = models.get(request.model)
    spec = found.spec
    grounding = grounding_of(found, detect=detect)
    out = _stdout_to_stderr() if args.json else sys.stdout

    async def run(service):
        if args.answer is not None:
            return await service.inspect(request, start_engine=False), args.answer
        inspection = None
        async for event in service.chat(detect_request(request, found, args.text)):
            if isinstance(event, Failed):
                raise InputError(event.message)
            if isinstance(event, Rendered):
                inspection = event.inspection
            if isinstance(event, Done):
                return inspection, event.answer
        raise InputError("the answer did not finish")

    inspection, answer = asyncio.run(_with_service(models, settings, run, engine=args.answer is None))
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
    from ..grounding import cells, place
    from ..intake import Page, picture
    from ..service import Turn, grounding_of, page_requests

    answers = [_read_answer(path) for path in args.answer]
    models, request = _request(args, settings)
    found = models.get(request.model)
    spec = found.spec
    grounding = grounding_of(found)
    question = request.turns[-1]
    pages = question.media.get("image", ())
    if not pages or any(picture(page) is None for page in pages):
        raise InputError("read needs the pages as --image: picture files or URLs, or a PDF")
    if len(pages) != len(answers):
        raise InputError(f"{len(pages)} page{'s' * (len(pages) != 1)} but {len(answers)} answer"
                         f"{'s' * (len(answers) != 1)}: give one --answer file per page, in page order")
    split = ([one for _, one in page_requests(request)] if all(isinstance(page, Page) for page in pages) else  # (as
             [dataclasses.replace(request, turns=(Turn("user", question.text, {"image": (page,)}),))  # the service
              for page in pages])  # splits a document's pages; pictures given one by one are each a page)
    out = _stdout_to_stderr() if args.json else sys.stdout

    async def run(service):
        return [await service.inspect(one, start_engine=False) for one in split]

    inspections = asyncio.run(_with_service(models, settings, run, engine=False))
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
