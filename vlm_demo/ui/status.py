"""The page's lines about engines and waits: the status line beside the model picker (where each engine stands), the
picker's entries, why a pick cannot start, and the stats line while a question waits (sent, rendered, the engine's
start, the prefill). Gradio-free."""

from __future__ import annotations

import html

from ..service import ChatService, Prefilling, Waiting
from ..inspector import Inspection


def state_text(service: ChatService, name: str, starting: bool = False) -> str:
    """The status line: the model, where its engine stands (while it starts: the phase and seconds so far, bytes
    while downloading; why its last start failed) and whether its weights are random; then every other engine that
    runs or starts, the one used last first (every tab shows the same). ``starting``: a start was just asked
    for."""
    spec = service.registry.get(name)
    note = " · **random weights**: answers are noise, prompts and token counts are real" if spec.random_weights else ""
    if spec.remote:
        state = f"**remote**: {spec.endpoint}"
    elif (progress := service.start_progress(name)) is not None:
        state = f"**starting**: {progress}"
    elif (failed := service.start_failure(name)) is not None:
        state = f"**did not start**: {failed}"
    else:
        state = f"**{service.engine_state(name)}**"
        if starting and state != "**ready**":
            state = "**starting**"
        elif state == "**not loaded**":
            state += " (it starts at the first question)"
    others = [f"{service.registry.get(other).label} {state}" for other, state in service.engine_states()
              if other != name and other in service.registry.names]
    warm = f'\n\n<span class="also-running">also running: {html.escape(" · ".join(others))}</span>' if others else ""
    return f"{spec.display_label} — engine: {state}{note}{warm}"


def picker_choices(service: ChatService) -> list[tuple[str, str]]:
    """The model picker's entries: those this machine can start now first, each as its label with a note where it
    cannot ("— needs a GPU") or its first start fetches something ("— downloads 7.5 GB at its first start")."""
    found = [(spec, service.availability(spec.name)) for spec in service.registry.models]
    return [(spec.display_label + ok.note(), spec.name)
            for spec, ok in sorted(found, key=lambda pair: not pair[1].runnable)]


def refusal_text(service: ChatService, name: str, why: str) -> str:
    """What the page says where a picked model cannot start here (the running engine stays)."""
    return f"**{service.registry.get(name).label} cannot start here**: {why}. The model stays as it was."


def sent_text(service: ChatService, model: str) -> str:
    """The stats line the moment a question is sent: what happens now (its engine's start, where it is not running
    yet: the question waits for it; vLLM's renderer renders it meanwhile)."""
    if service.engine_running(model):
        return "rendering the question with vLLM's renderer…"
    return (f"waiting for the {model} engine to start: {service.start_progress(model) or 'starting'} (vLLM's "
            "renderer renders the question meanwhile)")


def rendered_text(service: ChatService, model: str, inspection: Inspection) -> str:
    """The stats line once the question is rendered: the engine's prefill begins (or, where the engine is not running
    yet, the wait for its start)."""
    if service.engine_running(model):
        return f"prefill: the engine reads the {inspection.budget.total:,}-token prompt…"
    return sent_text(service, model)


def waiting_text(event: Waiting) -> str:
    """The stats line while a question waits for its model's engine to start: how long it has waited since it was
    sent, and where the start stands."""
    return (f"waited {event.waited_s:.0f} s so far: waiting for the {event.model} engine to start: {event.phase} "
            "(the panels show vLLM's render already)")


def prefill_text(event: Prefilling) -> str:
    """The stats line while the engine prefills (no token yet): what it encodes and the seconds so far, after the
    wait for its start where there was one."""
    start = f"the engine's start {event.waited_s:.1f} s, then " if event.waited_s >= 0.05 else ""
    return f"{start}prefill: the engine encodes {event.what} · **{event.seconds:.0f} s** so far"
