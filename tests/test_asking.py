"""One request, one way (issue 45): the page, its API, the command line and the cost tool (the MCP tool's twin) turn
the same inputs into the same ``ChatRequest`` through ``service.asking``: a document's pages at the dpi decided there
(the family's where none is asked), the processor settings under their controls' names, the entry's sampling, page
by page split by ``page_requests``. Nothing starts an engine (documents are read, nothing is rendered)."""

from __future__ import annotations

import dataclasses

import pytest

from vlm_demo.cli import build_parser
from vlm_demo.cli.commands import _request
from vlm_demo.intake import Page
from vlm_demo.service import ChatRequest, documents_of, page_requests
from vlm_demo.service.document_cost import cost_request
from vlm_demo.ui.chat_request import chat_request, read_message
from vlm_demo.ui.contract import api_inputs, control_names, endpoint_inputs
from vlm_demo.ui.controls import Controls

from .documents import make_pdf
from .conftest import data_url

MODEL = "tiny-qwen2.5-vl"
READER = "tiny-dots.ocr"  # (a family with its own dpi: 200)
QUESTION = "Read these pages."


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return make_pdf(tmp_path_factory.mktemp("asking") / "report.pdf", pages=3)


def page_request(registry, settings, report, model, pages, dpi, max_pixels):
    """The page's request (its API's too: the inputs by name as ``gradio_client`` sends them, ``api_inputs``)."""
    controls = Controls(registry, settings, control_names(registry), ())
    message = {"text": QUESTION, "files": [str(report)]}
    values = api_inputs(registry, "chat", model, message, controls={"pages": pages, "dpi": dpi, "each_page": True,
                                                                    "max_pixels": max_pixels})
    named = dict(zip([n for n in endpoint_inputs("chat", controls.kwargs) if n != "conversation"], values,
                     strict=True))
    return named, controls


async def the_four(registry, settings, service, report, model, pages, dpi, max_pixels) -> dict[str, ChatRequest]:
    named, controls = page_request(registry, settings, report, model, pages, dpi, max_pixels)
    turn, _ = await read_message(named["message"], named["urls"], settings, controls.documents(named))
    sampling = tuple(named[k] for k in ("temperature", "top_p", "max_tokens", "seed"))
    page = chat_request(controls, model, (turn,), named["system"], sampling, named)
    args = build_parser().parse_args(["chat", "--model", model, "--image", str(report), "--pages", pages, "--dpi",
                                      str(dpi), "--each-page", "--text", QUESTION, "--mm-kwargs",
                                      f'{{"max_pixels": {max_pixels}}}'])
    _, cli = await _cli(args, settings)
    data = data_url(report.read_bytes(), "application/pdf")
    cost = await cost_request(service, data, model, pages, dpi, QUESTION, {"max_pixels": max_pixels})
    return {"page and API": page, "command line": cli, "cost tool and MCP": cost}


async def _cli(args, settings):
    import asyncio

    return await asyncio.to_thread(_request, args, settings)  # (it runs its own loop, as the command line does)


def same(request: ChatRequest) -> ChatRequest:
    """``request`` with its pages' document name aside (a data: URL names no file)."""
    turns = tuple(dataclasses.replace(t, media={m: tuple(dataclasses.replace(i, source="report.pdf")
                                                          if isinstance(i, Page) else i for i in items)
                                               for m, items in t.media.items()}) for t in request.turns)
    return dataclasses.replace(request, turns=turns)


@pytest.mark.parametrize(("model", "pages", "dpi"), [(MODEL, "1-2", 72), (READER, "2", 0)])
async def test_the_front_ends_make_the_same_request(registry, settings, service, report, model, pages, dpi):
    dpi = dpi or documents_of(registry.get(model)).dpi  # (the page's slider starts at the family's; 0 asks for it)
    found = await the_four(registry, settings, service, report, model, pages, dpi, 200704)
    first = same(found["page and API"])
    for name, request in found.items():
        assert same(request) == first, name
    assert first.each_page and first.mm_kwargs == {"max_pixels": 200704} and first.sampling == registry.get(
        model).sampling
    numbers = [int(n) for n in pages.split("-")]
    read = [item for item in first.turns[-1].media["image"]]
    assert [p.number for p in read] == list(range(numbers[0], numbers[-1] + 1)) and {p.dpi for p in read} == {dpi}
    assert len(page_requests(first)) == len(read)  # (each page its own request: split one way)


def test_a_documents_dpi_is_decided_once(registry):
    """The family's where its checkpoint documents one (dots.ocr 200), else 144; what is asked, where asked."""
    assert documents_of(registry.get(READER)).dpi == 200 and documents_of(registry.get(MODEL)).dpi == 144
    assert documents_of(registry.get(READER), "1", 100).dpi == 100


async def test_a_question_resolves_its_model_once(registry, settings, engines, report, monkeypatch):
    """The profile handed down (issue 45): a service resolves a model's profile once, and a question's way from the
    page's values to what the engine renders with (the request, its checks, Detect, the media options, Export's body,
    a reader's document view) resolves nothing again: with the resolver failing after the first, it all still works.
    What one service keeps (controls derived) is its own: another service's profile of the model is untouched."""
    from vlm_demo import profile
    from vlm_demo.export import chat_completions_body
    from vlm_demo.service import ChatService, detect_request, sent_media_io
    from vlm_demo.ui.answer import document_view

    service = ChatService(registry, engines, settings)
    found = service.profile(MODEL)
    assert service.profile(MODEL) is found  # kept
    controls = Controls(service.profiles, settings, control_names(service.profiles), ())  # (the page: every model's)

    def again(*args, **kwargs):
        raise AssertionError("a profile resolved again on a question's way")
    monkeypatch.setattr(profile, "resolve", again)
    values = api_inputs(service.profiles, "chat", MODEL, {"text": QUESTION, "files": [str(report)]},
                        controls={"max_pixels": 200704, "pages": "1"})
    named = dict(zip([n for n in endpoint_inputs("chat", controls.kwargs) if n != "conversation"], values,
                     strict=True))
    turn, _ = await read_message(named["message"], named["urls"], settings, controls.documents(named))
    sampling = tuple(named[k] for k in ("temperature", "top_p", "max_tokens", "seed"))
    request = detect_request(chat_request(controls, MODEL, (turn,), named["system"], sampling, named),
                             service.profile(MODEL), "the title")
    assert service.validate(request) is found and request.mm_kwargs == {"max_pixels": 200704}
    assert chat_completions_body(request, found)["mm_processor_kwargs"] == found.mm_processor_kwargs(request.mm_kwargs)
    assert sent_media_io(request, found, settings) == {} and document_view(found, request)("answer", ()) == ""

    kept = service.profiles.keep(found.with_derived(()))
    monkeypatch.undo()
    other = ChatService(registry, engines, settings)
    assert service.profile(MODEL) is kept and other.profile(MODEL).derived is None
