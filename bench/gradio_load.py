"""Users of the running app's Gradio API (``gradio_client``), in their own process so their CPU time is
not the app's: each of ``--users`` threads asks ``--per-user`` questions back to back. Prints one JSON object.

    python -m bench.gradio_load --url URL --model NAME --users 8 --per-user 4 --max-tokens 128 --picture FILE
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import gradio_client.utils
from gradio_client import Client, handle_file
from gradio_client.client import Endpoint

from vlm_demo.profile import load_registry
from vlm_demo.settings import Settings
from vlm_demo.ui.contract import api_inputs, named_outputs

from .common import QUESTION, shows_answer, users_parser


def chat_args(model: str, picture: str, max_tokens: int, api_name: str = "chat", question: str = QUESTION,
              controls: dict[str, Any] | None = None) -> list:
    """The inputs of ``/chat`` (or ``api_name``: ``/inspect``), by name: the question with the picture (or a PDF),
    the model's own settings but for ``controls`` (``each_page``, say)."""
    registry = load_registry(Settings.from_env().models_file)
    message = {"text": question, "files": [handle_file(picture)]}
    if api_name != "chat":
        return api_inputs(registry, api_name, model, message, controls=controls)
    return api_inputs(registry, "chat", model, message, temperature=0.7, top_p=0.9, max_tokens=max_tokens,
                      controls=controls)


STEPS = ("upload", "queue", "read the message", "render", "panels", "first text update", "delivery")

_uploaded: dict[int, float] = {}
"""When each client's last upload ended (wall clock), by ``id(client)``."""
_slowest: dict[int, float] = {}
"""Per client: its slowest call that is not a stream (/clear, the upload), in seconds."""
_upload_file = Endpoint._upload_file


def _timed_upload(self: Endpoint, *args: Any, **kwargs: Any) -> dict[str, Any]:
    out = _upload_file(self, *args, **kwargs)
    _uploaded[id(self.client)] = time.time()
    return out


Endpoint._upload_file = _timed_upload  # gradio_client uploads the picture inside submit (a browser: on attach)

CLIENT_TIMEOUT_S = 120.0
"""gradio_client's own limit on its calls that are not a stream (joining the queue, uploading, /clear): httpx's
default of 5 s ended a loaded run on a machine busy with other work (``ReadTimeout``) while the app answered; the
slowest such call is reported (``slowest_call_s``) so a real stall of the app shows as a figure, not a timeout."""
POLL_S = 0.002
"""How often the users look for a new streamed message. gradio_client looks every 50 ms (``time.sleep(0.05)``
in ``gradio_client.utils.get_pred_from_sse_v1plus``), which adds 0-50 ms to every update it reads, the first
answer text included; a browser reads each server-sent event as it arrives."""


class _Polling:
    """``time`` for ``gradio_client.utils``, its sleeps cut to ``POLL_S``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, POLL_S))


gradio_client.utils.time = _Polling()  # type: ignore[assignment]


def steps(submitted: float, uploaded: float, marks: dict[str, float], seen: float) -> dict[str, float]:
    """Where the time from submit to the first answer text went, in seconds per step: from the client's
    submit to the end of its upload, on to the handler's start (queue: joining it, Gradio's preprocessing),
    the handler's marks (``stats_data["marks"]``: read, rendered, panels, first_text), and from the
    handler's first text to the client seeing it (delivery). All are wall clocks of the same machine."""
    times = [submitted, uploaded, marks["handler"], marks["read"], marks["rendered"], marks["panels"],
             marks["first_text"], seen]
    return {name: b - a for name, a, b in zip(STEPS, times[:-1], times[1:], strict=True)}


def ask(client: Client, args: list) -> tuple[float, int, float, float, dict[str, float]]:
    """One question in a new conversation: time to the first answer text on the page, tokens generated,
    the server's own figures (the ``stats_data`` output: time to first token, tokens/s) and the steps to
    the first answer text (:func:`steps`)."""
    t_clear = time.perf_counter()
    client.predict(api_name="/clear")  # a new conversation in the same session, as the page's Clear button
    _slowest[id(client)] = max(_slowest.get(id(client), 0.0), time.perf_counter() - t_clear)
    t0, submitted = time.perf_counter(), time.time()
    ttft, seen = 0.0, 0.0
    job = client.submit(*args, api_name="/chat")
    for update in job:
        chat = named_outputs("chat", update)["chat"]
        if not ttft and shows_answer(chat):
            ttft, seen = time.perf_counter() - t0, time.time()
    stats = named_outputs("chat", job.result(timeout=300))["stats_data"]
    if not isinstance(stats, dict) or stats.get("status") != "done":
        raise RuntimeError(f"the answer did not finish: {stats!r}")
    marks = stats.get("marks") or {}
    uploaded = _uploaded.get(id(client), submitted)
    _slowest[id(client)] = max(_slowest[id(client)], uploaded - submitted)
    split = steps(submitted, uploaded, marks, seen) if seen and "first_text" in marks and uploaded >= submitted else {}
    return ttft or time.perf_counter() - t0, stats["tokens"], stats["ttft_s"], stats["tokens_per_s"], split


def main(argv: list[str] | None = None) -> int:
    args = users_parser(__doc__).parse_args(argv)
    inputs = chat_args(args.model, args.picture, args.max_tokens)
    # The users read the streamed text; they do not download the pictures of each update.
    clients = [Client(args.url, verbose=False, download_files=False, httpx_kwargs={"timeout": CLIENT_TIMEOUT_S})
               for _ in range(args.users)]
    runs: list[tuple[float, int, float, float, dict[str, float]]] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(args.users + 1)

    def user(client: Client) -> None:
        start.wait()
        for _ in range(args.per_user):
            try:
                run = ask(client, inputs)
                with lock:
                    runs.append(run)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(repr(exc)[:300])

    threads = [threading.Thread(target=user, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    start.wait()
    t0, cpu0 = time.perf_counter(), os.times()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = os.times()
    cpu_s = cpu.user + cpu.system - cpu0.user - cpu0.system  # the users' own CPU time during the load
    json.dump({"users": args.users, "wall_s": wall, "ttft_s": [r[0] for r in runs], "cpu_s": cpu_s,
               "tokens": sum(r[1] for r in runs), "requests": len(runs), "errors": errors,
               "server_ttft_s": [r[2] for r in runs], "server_tokens_per_s": [r[3] for r in runs],
               "steps": [r[4] for r in runs if r[4]], "slowest_call_s": max(_slowest.values(), default=0.0)},
              sys.stdout)
    print()
    for c in clients:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
