"""The app in front of a remote vLLM OpenAI server: a real server (what ``vllm serve`` runs) for the tiny
Qwen2.5-VL model on 127.0.0.1, beside the app's local engine of the same model. The remote entry must
give the same inspection (ids, ranges, counts, prompt) and the same streamed answer, Stop must abort the
server's request, and an unreachable or failing server must give a clear message, never a hang.

One server (module-scoped) and one local engine are alive at most. Only 127.0.0.1 is contacted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from vlm_demo.engine import EngineManager, RemoteEngine
from vlm_demo.errors import RegistryError, RemoteError
from vlm_demo.export import chat_completions_body, curl_command, python_snippet, serve_command
from vlm_demo.intake import load_image
from vlm_demo.registry import ModelSpec, Registry, Sampling, parse_registry
from vlm_demo.service import ChatRequest, ChatService, Failed, Turn
from vlm_demo.settings import Settings
from vlm_demo.profile import check, spec_for_endpoint

from .conftest import ARTIFACTS, ROOT, free_port, make_image, run_cli
from .vllm_server import HOST, SCALE_OUT_FLAGS, Server, assert_same, beside_local_engine, collect

pytestmark = [pytest.mark.engine, pytest.mark.server]


MODEL = "tiny-qwen2.5-vl"
CASES = {"default": {}, "slider moved": {"max_pixels": 200704}}


def remote_spec(registry: Registry, url: str, **changes) -> ModelSpec:
    """The registry's tiny Qwen2.5-VL entry as an endpoint entry (its own name beside the local one)."""
    spec = spec_for_endpoint(registry, url, MODEL)
    return dataclasses.replace(spec, name=f"remote-{MODEL}", **changes)


def request_for(model: str, mm_kwargs: dict[str, int] | None = None, sampling: Sampling | None = None) -> ChatRequest:
    images = (make_image(640, 480), make_image(300, 500, seed=1))
    return ChatRequest(model=model, turns=(Turn("user", "What is in these pictures?", {"image": tuple(images)}),),
                       mm_kwargs=mm_kwargs or {}, sampling=sampling)


@pytest.fixture(scope="module")
async def server(registry: Registry, engines: EngineManager, settings: Settings, kept_server):
    """vLLM's OpenAI server for the tiny Qwen2.5-VL model with the app's engine flags plus the remote
    panels' flags; meanwhile the app's local engine of the same model starts (others stop first). Kept for
    test_vllm_server.py, which asks for the same server."""
    spec = registry.get(MODEL)
    async with beside_local_engine(spec, engines, settings, ARTIFACTS / f"vllm-server-remote-{MODEL}.log",
                                   SCALE_OUT_FLAGS, kept=kept_server) as srv:
        yield srv


@pytest.fixture(scope="module")
def both(server: Server, registry: Registry, engines: EngineManager, settings: Settings) -> ChatService:
    """One service over the registry plus the remote entry: local and remote side by side."""
    return ChatService(registry.with_model(remote_spec(registry, server.url)), engines, settings)


@pytest.mark.parametrize("case", list(CASES))
async def test_inspection_equals_the_local_engines(both: ChatService, case: str):
    remote = await both.inspect(request_for(f"remote-{MODEL}", CASES[case]))
    local = await both.inspect(request_for(MODEL, CASES[case]))
    assert remote.model == f"remote-{MODEL}" and local.model == MODEL
    assert [im.count for im in remote.items["image"]] and all(im.count for im in remote.items["image"])
    assert_same(remote, local)
    engine = both.engines.engine(f"remote-{MODEL}")
    assert isinstance(engine, RemoteEngine) and engine.offers_render
    assert both.engines.special_tokens(f"remote-{MODEL}") == both.engines.special_tokens(MODEL)


async def test_slider_takes_effect_on_the_server(both: ChatService):
    default = await both.inspect(request_for(f"remote-{MODEL}"))
    moved = await both.inspect(request_for(f"remote-{MODEL}", CASES["slider moved"]))
    assert moved.items["image"][0].count < default.items["image"][0].count


async def test_tokenize_fallback_gives_the_same_inspection(both: ChatService, server: Server, registry, settings):
    """A server without ``--enable-scale-out`` answers render with 403; the ids then come from /tokenize."""
    async with httpx.AsyncClient(base_url=server.url, trust_env=False) as client:
        assert (await client.post("/v1/chat/completions/render", json={})).status_code != 403  # on here
    local = await both.inspect(request_for(MODEL))
    engine = RemoteEngine(remote_spec(registry, server.url), settings)
    await engine.connect()
    engine.offers_render = False  # as after a 403
    rendered = await engine.render(*_messages_and_kwargs(request_for(MODEL), registry))
    await engine.aclose()
    from vlm_demo.inspector import inspect

    assert_same(inspect(rendered, engine.token_runs(rendered.prompt_token_ids)), local)


async def test_a_system_prompt_and_an_earlier_answer_render_as_locally(both: ChatService, registry, settings):
    """The request body (``engine.openai_request``) carries a system prompt and an earlier answer as plain text:
    the server's render and its /tokenize give the local engine's ids for them."""
    from vlm_demo.inspector import inspect

    def asked(model: str) -> ChatRequest:
        first = request_for(model).turns[0]
        return ChatRequest(model=model, system="Answer in one word.",
                           turns=(first, Turn("assistant", "Squares."), Turn("user", "And their colours?")))

    local = await both.inspect(asked(MODEL))
    assert_same(await both.inspect(asked(f"remote-{MODEL}")), local)
    engine = RemoteEngine(both.registry.get(f"remote-{MODEL}"), settings)
    await engine.connect()
    engine.offers_render = False  # as after a 403: the ids from /tokenize
    rendered = await engine.render(*_messages_and_kwargs(asked(MODEL), registry))
    await engine.aclose()
    assert_same(inspect(rendered, engine.token_runs(rendered.prompt_token_ids)), local)


def _messages_and_kwargs(request: ChatRequest, registry: Registry):
    from vlm_demo.service import to_openai_messages

    return to_openai_messages(request), registry.get(MODEL).default_mm_kwargs()


async def test_streamed_answer_equals_the_local_engines(both: ChatService, report):
    # Every token on both sides: the server does not restrict a random-weight model to printable tokens.
    sampling = Sampling(temperature=0.8, top_p=0.95, max_tokens=24, seed=1234, printable_only=False)
    t0 = time.perf_counter()
    rendered_r, remote = await collect(both, request_for(f"remote-{MODEL}", sampling=sampling))
    t_remote = time.perf_counter() - t0
    rendered_l, local = await collect(both, request_for(MODEL, sampling=sampling))
    assert rendered_r.rendered.prompt_token_ids == rendered_l.rendered.prompt_token_ids
    assert remote.figures.tokens == local.figures.tokens == 24 or remote.figures.finish_reason == local.figures.finish_reason == "stop"
    assert remote.answer == local.answer
    assert remote.figures.finish_reason == local.figures.finish_reason
    report(f"remote chat (tiny Qwen2.5-VL, 2 images, 24 tokens): {t_remote:.2f} s, ttft {remote.figures.ttft_s:.3f} s")


async def test_first_delta_carries_the_servers_prompt_ids(both: ChatService, registry):
    engine = await both.engines.get(both.registry.get(f"remote-{MODEL}"))
    rendered = await engine.render(*_messages_and_kwargs(request_for(MODEL), registry))
    deltas = [d async for d in engine.stream(rendered, Sampling(max_tokens=3, seed=1))]
    assert deltas[0].prompt_token_ids == rendered.prompt_token_ids
    assert sum(d.num_tokens for d in deltas) == 3
    assert deltas[-1].finish_reason == "length"


async def test_done_counts_the_servers_prefix_cache_hits(both: ChatService):
    """The server's usage (``prompt_tokens_details.cached_tokens``, with ``--enable-prompt-tokens-details``)
    reaches ``Done.figures.cached_tokens``: the same two-image prompt, asked again, comes from its prefix cache."""
    images = (make_image(364, 252, seed=21), make_image(252, 364, seed=22))  # images no other test sends
    request = ChatRequest(model=f"remote-{MODEL}", turns=(Turn("user", "Anything new?", {"image": images}),),
                          sampling=Sampling(max_tokens=4, seed=1))
    _, first = await collect(both, request)
    _, again = await collect(both, request)
    assert first.figures.prompt_tokens == again.figures.prompt_tokens > 0
    assert first.figures.cached_tokens < again.figures.cached_tokens <= again.figures.prompt_tokens


def fresh_service(server: Server, registry: Registry, settings: Settings, **changes) -> ChatService:
    """A service whose remote engine is its own (it has sent the server nothing yet)."""
    settings = dataclasses.replace(settings, **changes)
    return ChatService(registry.with_model(remote_spec(registry, server.url)), EngineManager(settings), settings)


async def posts(service: ChatService) -> list[tuple[str, int, bytes]]:
    """Each request the service's remote engine posts from now on: its path, status and body (httpx hooks)."""
    engine = await service.engines.get(service.registry.get(f"remote-{MODEL}"))
    seen: list[tuple[str, int, bytes]] = []

    async def response(r: httpx.Response) -> None:
        if r.request.method == "POST":
            seen.append((r.request.url.path, r.status_code, r.request.content))
    engine._client().event_hooks["response"] = [response]
    return seen


async def test_turn_two_sends_the_servers_pictures_by_reference(server: Server, registry, settings):
    """Pictures the server has processed go again as their uuid alone (no bytes): turn 2 posts no picture, and
    renders and counts as the same turn posted with the pictures' bytes (vLLM takes them from its cache)."""
    images = (make_image(420, 300, seed=31), make_image(300, 420, seed=32))  # images no other test sends
    turns = (Turn("user", "What is in these pictures?", {"image": images}),)
    second = (*turns, Turn("assistant", "Two pictures."), Turn("user", "Which is wider?"))
    seen = {}
    for by_reference in (True, False):
        service = fresh_service(server, registry, settings, remote_media_by_reference=by_reference)
        sent = await posts(service)
        for asked in (turns, second):
            sent.clear()
            rendered, done = await collect(service, ChatRequest(model=f"remote-{MODEL}", turns=asked,
                                                                sampling=Sampling(max_tokens=2, seed=1)))
        seen[by_reference] = rendered.inspection.prompt_token_ids, done.figures.prompt_tokens, sent
    (ids, prompt_tokens, sent), (ids_bytes, prompt_tokens_bytes, sent_bytes) = seen[True], seen[False]
    assert (ids, prompt_tokens) == (ids_bytes, prompt_tokens_bytes)
    assert [path for path, _, body in sent_bytes if body.count(b"data:image/png") == 2] == [
        "/v1/chat/completions/render", "/v1/chat/completions"]
    assert not any(b"data:image" in body for _, _, body in sent), [path for path, _, _ in sent]
    assert sum(len(body) for *_, body in sent) * 10 < sum(len(body) for *_, body in sent_bytes)


async def test_a_server_without_the_picture_gets_its_bytes(server: Server, registry, settings):
    """A picture sent by reference that the server no longer holds (its cache evicted it, or another of its API
    servers answers) is refused (400); the engine sends the bytes at once and the answer comes, for the render
    and for the answer alike."""
    service = fresh_service(server, registry, settings)
    sent = await posts(service)
    engine = await service.engines.get(service.registry.get(f"remote-{MODEL}"))
    from vlm_demo.engine.openai_request import by_reference

    engine._media.lean = lambda path, body: by_reference(body, lambda uuid: True)  # as if the server had lost each
    images = (make_image(330, 250, seed=41),)
    _, done = await collect(service, ChatRequest(model=f"remote-{MODEL}", turns=(Turn("user", "And this?",
                            {"image": images}),), sampling=Sampling(max_tokens=2, seed=1)))
    assert done.figures.tokens == 2
    media = [(path, status, b"data:image" in body) for path, status, body in sent if path != "/detokenize"]
    assert media == [("/v1/chat/completions/render", 400, False), ("/v1/chat/completions/render", 200, True),
                     ("/v1/chat/completions", 400, False), ("/v1/chat/completions", 200, True)]


async def metric(server: Server, name: str) -> float:
    """One of the server's Prometheus figures, summed over its labels."""
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=30) as client:
        text = (await client.get("/metrics")).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, f"no {name} in /metrics"
    return sum(values)


async def test_stop_aborts_the_servers_request(both: ChatService, server: Server, registry):
    """Closing the answer's stream (what Stop does through the service) closes the HTTP stream; the server
    drops the request at once instead of filling the context window. Counted in tokens, not text deltas:
    most of a random-weight model's tokens decode to no text. The stream is closed right after the third
    token, with no other request in between (a /metrics read there competed with the server's own
    streaming and, on a busy machine, came back after the answer had ended). A try in which the server
    still generated every token is ambiguous (too fast, or no abort); another runs, and three such fail."""
    engine = await both.engines.get(both.registry.get(f"remote-{MODEL}"))
    rendered = await engine.render(*_messages_and_kwargs(request_for(MODEL), registry))
    max_tokens = rendered.max_model_len - len(rendered.prompt_token_ids)
    sampling = Sampling(max_tokens=max_tokens, ignore_eos=True, seed=1)
    tries = []
    for _ in range(3):
        before = await metric(server, "vllm:generation_tokens_total")
        tokens = 0
        async with contextlib.aclosing(engine.stream(rendered, sampling)) as deltas:
            async for delta in deltas:
                tokens += delta.num_tokens
                if tokens >= 3:
                    break
        deadline = time.monotonic() + 30
        while await metric(server, "vllm:num_requests_running") and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await metric(server, "vllm:num_requests_running") == 0
        stopped_at = await metric(server, "vllm:generation_tokens_total")
        await asyncio.sleep(1.0)
        assert await metric(server, "vllm:generation_tokens_total") == stopped_at  # nothing generates any more
        generated = stopped_at - before
        assert generated >= tokens >= 3
        tries.append(int(generated))
        if generated < max_tokens:
            return
    pytest.fail(f"the server generated all {max_tokens} tokens in every try ({tries}): Stop did not abort it, "
                "or it finished before the client could read three tokens")


async def test_server_errors_carry_the_servers_text(both: ChatService, server: Server, registry, settings):
    engine = await both.engines.get(both.registry.get(f"remote-{MODEL}"))
    messages, _ = _messages_and_kwargs(request_for(MODEL), registry)
    with pytest.raises(RemoteError, match=r"answered 400: .*Qwen2_5_VLProcessor"):
        await engine.render(messages, {"max_pixels": "lots"})
    rendered = await engine.render(messages, {})
    wrong = dataclasses.replace(rendered, engine_input={**rendered.engine_input, "model": "nope"})
    with pytest.raises(RemoteError, match=r"answered 404: The model `nope` does not exist"):
        async for _ in engine.stream(wrong, Sampling(max_tokens=2)):
            pass
    unknown = ChatService(registry.with_model(remote_spec(registry, server.url, served_model_name="nope")),
                          EngineManager(settings), settings)
    with pytest.raises(RemoteError, match=f"{server.url} does not serve 'nope' \\(it serves {MODEL}\\)"):
        await unknown.inspect(request_for(f"remote-{MODEL}"))


async def test_a_model_the_app_cannot_identify_forwards_what_is_typed(server: Server, registry, settings, monkeypatch):
    """A served model of no family whose checkpoint the app cannot have (here: as if its root were a Hub id with
    the Hub out of reach) gets no controls; what the person types goes to the server as it is: a setting the
    server takes renders there, one it refuses is the server's own error in one line."""
    from vlm_demo.errors import EngineStartError

    def unreachable(self, spec, root, max_model_len=None):
        raise EngineStartError(f"could not download {root}: the connection to https://huggingface.co failed")
    monkeypatch.setattr(EngineManager, "reference_renderer", unreachable)
    spec = dataclasses.replace(remote_spec(registry, server.url, family="generic", controls=()), name="unknown-remote")
    service = ChatService(registry.with_model(spec), EngineManager(settings), settings)
    assert (await service.controls(spec.name)).controls == ()
    typed = {"images_kwargs.size.longest_edge": 100352, "images_kwargs.size.shortest_edge": 3136}
    sized = await service.inspect(request_for(spec.name, typed))
    assert sized.mm_kwargs == {"images_kwargs": {"size": {"longest_edge": 100352, "shortest_edge": 3136}}}  # as typed
    plain = await service.inspect(request_for(spec.name))
    assert [i.count for i in sized.items["image"]] == [117, 112] != [i.count for i in plain.items["image"]]  # smart_resize
    with pytest.raises(RemoteError, match=r"answered 400: .*Qwen2_5_VLProcessor") as err:
        await service.inspect(request_for(spec.name, {"max_pixels": "lots"}))
    assert "\n" not in str(err.value)


async def test_cli_against_the_endpoint(both: ChatService, server: Server, settings):
    image = ROOT / "assets" / "bar-chart.png"
    args = ["--endpoint", server.url, "--model", MODEL, "--image", str(image), "--text", "Best quarter?", "--json"]
    out = await asyncio.to_thread(run_cli, "inspect", *args)
    assert out.returncode == 0, out.stderr
    remote = json.loads(out.stdout)
    local = await both.inspect(ChatRequest(model=MODEL, turns=(Turn("user", "Best quarter?",
                                                                    {"image": (load_image(image, settings),)}),)))
    assert remote["prompt_token_ids"] == list(local.prompt_token_ids)
    assert remote["images"][0]["count"] == local.items["image"][0].count and remote["prompt"] == local.prompt
    out = await asyncio.to_thread(run_cli, "chat", *args, "--max-tokens", "4")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)  # random weights: an end-of-text token may come before the 4th
    assert done["num_tokens"] == 4 and done["finish_reason"] == "length" or (
        done["num_tokens"] < 4 and done["finish_reason"] == "stop"), done


async def test_the_export_replays_against_the_endpoint(server: Server, registry, tmp_path, monkeypatch):
    """The export panel of an endpoint entry names that server, reads the API key from the entry's variable
    (never writes it out), and its curl command and Python snippet both get an answer from the real server,
    slider kwargs included."""
    spec = remote_spec(registry, server.url, api_key_env="VLM_DEMO_TEST_KEY")
    request = request_for(spec.name, {"max_pixels": 200704}, Sampling(max_tokens=4, seed=1))
    body = chat_completions_body(request, spec)
    (tmp_path / "request.json").write_text(json.dumps(body))
    curl, snippet = serve_command(spec) + "\n\n" + curl_command(spec), python_snippet(body, spec)
    assert server.url in serve_command(spec) and "localhost" not in curl + snippet
    assert "$VLM_DEMO_TEST_KEY" in curl and 'os.environ["VLM_DEMO_TEST_KEY"]' in snippet
    monkeypatch.setenv("VLM_DEMO_TEST_KEY", "not-written-out")
    out = await asyncio.to_thread(subprocess.run, ["bash", "-c", curl], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("data: [DONE]"), out.stdout[-500:] + out.stderr
    chunks = [json.loads(line[5:]) for line in out.stdout.splitlines() if line.startswith("data: {")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", snippet], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    body["mm_processor_kwargs"] = {"max_pixels": "lots"}  # the kwargs do reach the server
    (tmp_path / "request.json").write_text(json.dumps(body))
    out = await asyncio.to_thread(subprocess.run, ["bash", "-c", curl], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=120)
    assert "max_pixels" in out.stdout and "[DONE]" not in out.stdout, out.stdout[-500:]


@pytest.mark.parametrize(("model", "mm_kwargs"), [("tiny-llava-1.5", {}), ("tiny-internvl2.5", {}),
                                                  ("tiny-internvl2.5", {"max_dynamic_patch": 6})])
async def test_fallback_ranges_and_geometry_match_the_local_engine(service: ChatService, registry, model, mm_kwargs):
    """Without render, ranges come from the ids and geometry from the image size and kwargs: for the
    other families too, they must equal what the local engine's processor output gives."""
    from vlm_demo import families
    from vlm_demo.engine.remote_prompt import ranges_from_ids

    spec = registry.get(model)
    request = request_for(model, mm_kwargs)
    inspection = await service.inspect(request)
    tokenizer = service.engines.engine(model).tokenizer
    markers = families.get(spec.family).markers.get("image", ("", ""))
    start, end = (tokenizer.convert_tokens_to_ids(m) if m else None for m in markers)
    ids = inspection.prompt_token_ids
    ranges = ranges_from_ids(ids, inspection.items["image"][0].token_id, start, end)
    assert [(r.offset, r.length) for r in ranges] == [(im.offset, im.length) for im in inspection.items["image"]]
    kwargs = {**spec.default_mm_kwargs(), **mm_kwargs}
    for im, image in zip(inspection.items["image"], request.turns[0].media["image"], strict=True):
        assert im.grid is not None or im.processed_size is not None
        g = families.get(spec.family).geometry_from_count["image"](im.count, image, kwargs)
        assert (g.orig_size, g.processed_size, g.grid, g.thumbnail) == (
            im.orig_size, im.processed_size, im.grid, im.thumbnail)


# --- no vLLM server needed below -----------------------------------------------------------------


def fast(settings: Settings) -> Settings:
    return dataclasses.replace(settings, remote_connect_timeout_s=1.0, remote_timeout_s=1.0)


async def test_connection_refused_is_named(registry, settings):
    url = f"http://{HOST}:{free_port()}"  # nothing listens there
    service = ChatService(registry.with_model(remote_spec(registry, url)), EngineManager(settings), settings)
    events = [e async for e in service.chat(request_for(f"remote-{MODEL}"))]
    assert events == [Failed(f"cannot reach {url}: connection refused")]


async def test_a_silent_server_times_out(registry, settings):
    with socket.socket() as listener:  # accepts connections (the kernel's backlog), never answers
        listener.bind((HOST, 0))
        listener.listen(8)
        url = f"http://{HOST}:{listener.getsockname()[1]}"
        manager = EngineManager(fast(settings))
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match=f"^{url}/v1/models timed out after 1 s$"):
            await manager.get(remote_spec(registry, url))
        assert time.monotonic() - t0 < 5


class KeyedHandler(BaseHTTPRequestHandler):
    """A fake OpenAI server that wants ``Bearer secret-1``; it records the Authorization headers."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != "Bearer secret-1":
            status, body = 401, {"error": {"message": "Unauthorized: bad API key", "type": "x", "code": 401}}
        else:
            status, body = 200, {"object": "list", "data": [{"id": "other", "max_model_len": 100}]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def keyed_server():
    httpd = ThreadingHTTPServer((HOST, 0), KeyedHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://{HOST}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_api_key_comes_from_the_named_variable(registry, settings, monkeypatch):
    with keyed_server() as url:
        spec = remote_spec(registry, url, api_key_env="VLM_DEMO_TEST_KEY")
        monkeypatch.delenv("VLM_DEMO_TEST_KEY", raising=False)
        with pytest.raises(RemoteError, match="VLM_DEMO_TEST_KEY .* is not set"):
            await EngineManager(fast(settings)).get(spec)
        monkeypatch.setenv("VLM_DEMO_TEST_KEY", "wrong")
        with pytest.raises(RemoteError, match=r"/v1/models: the server answered 401: Unauthorized: bad API key$"):
            await EngineManager(fast(settings)).get(spec)
        monkeypatch.setenv("VLM_DEMO_TEST_KEY", "secret-1")
        with pytest.raises(RemoteError, match=rf"{url} does not serve '{MODEL}' \(it serves other\)"):
            await EngineManager(fast(settings)).get(spec)
    assert KeyedHandler.seen[-2:] == ["Bearer wrong", "Bearer secret-1"]


class IngressOnlyHandler(BaseHTTPRequestHandler):
    """A fake OpenAI ingress with chat and a model list only (no vLLM tokenizer endpoints)."""

    protocol_version = "HTTP/1.1"
    models: list[dict] = []

    def log_message(self, *args):
        pass

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/models":
            status, body = 200, {"object": "list", "data": self.models}
        else:
            status, body = 404, {"detail": "Not Found"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815


@pytest.mark.parametrize(("listing", "expected"), [
    ({"id": MODEL}, "gives no max_model_len for 'tiny-qwen2.5-vl' \\(the app needs a vLLM server\\)"),
    ({"id": MODEL, "max_model_len": 4096}, "does not offer /tokenize \\(nor /v1/chat/completions/render\\)"),
])
async def test_an_ingress_without_vllms_endpoints_is_named(registry, settings, monkeypatch, listing, expected):
    monkeypatch.setattr(IngressOnlyHandler, "models", [listing])
    httpd = ThreadingHTTPServer((HOST, 0), IngressOnlyHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RemoteError, match=expected):
            await EngineManager(fast(settings)).get(remote_spec(registry, f"http://{HOST}:{httpd.server_address[1]}"))
    finally:
        httpd.shutdown()
        httpd.server_close()


REMOTE_ENTRY = """
models:
  - name: big
    label: Big
    family: qwen2_5_vl
    endpoint: https://vllm.example.com:8000/
    served_model_name: Qwen/Qwen2.5-VL-72B-Instruct
    api_key_env: VLLM_API_KEY
    engine_args: {limit_mm_per_prompt: {image: 2}}
    controls:
      - {kwarg: max_pixels, label: max, min: 3136, max: 1003520, step: 784, default: 401408}
"""


def test_registry_reads_an_endpoint_entry():
    spec = parse_registry(REMOTE_ENTRY, Path("/etc/models.yaml")).get("big")
    assert spec.remote and not spec.random_weights and spec.display_label == "Big"
    assert (spec.endpoint, spec.served_model_name, spec.api_key_env) == (
        "https://vllm.example.com:8000/", "Qwen/Qwen2.5-VL-72B-Instruct", "VLLM_API_KEY")
    assert spec.engine_args.limit_mm_per_prompt == {"image": 2}


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("    api_key_env: VLLM_API_KEY\n", "    api_key: sk-abc123\n"),
         "key 'api_key': unknown key: never put a secret"),
        (("api_key_env: VLLM_API_KEY", "api_key_env: sk-abc123"), "key 'api_key_env'"),
        (("https://vllm.example.com:8000/", "ftp://vllm.example.com/"), "endpoint must be an http"),
        (("https://vllm.example.com:8000/", "https://me:pw@vllm.example.com/"), "must not hold credentials"),
        (("https://vllm.example.com:8000/", "https://vllm.example.com/?key=sk-1"), "must not hold credentials"),
        (("    served_model_name: Qwen/Qwen2.5-VL-72B-Instruct\n", ""), "needs served_model_name"),
        (("    family: qwen2_5_vl\n", "    family: gpt\n"), "unknown family 'gpt'"),
        (("{image: 2}}", "{image: 2}, tensor_parallel_size: 8}"), "tensor_parallel_size'] belong to the server"),
        (("    endpoint: https://vllm.example.com:8000/\n", "    repo: org/m\n"), "belong to an endpoint entry"),
        (("    endpoint: https://vllm.example.com:8000/\n", "    endpoint: http://h:1\n    tiny: true\n"),
         "exactly one of repo, path, tiny: true or endpoint"),
        (("kwarg: max_pixels", "kwarg: max_partition"), "max_partition"),
    ],
)
def test_bad_endpoint_entries(edit, expected):
    old, new = edit
    assert old in REMOTE_ENTRY
    with pytest.raises(RegistryError, match=expected) as info:
        parse_registry(REMOTE_ENTRY.replace(old, new, 1), Path("/etc/models.yaml"), check)
    assert str(info.value).startswith("/etc/models.yaml: model 'big': ")


def test_spec_for_endpoint(registry: Registry):
    spec = spec_for_endpoint(registry, "http://127.0.0.1:8000", "Qwen/Qwen2.5-VL-3B-Instruct")
    assert spec.family == "qwen2_5_vl" and spec.controls == registry.get("qwen2.5-vl-3b").controls
    assert spec.name == "Qwen-Qwen2.5-VL-3B-Instruct" and spec.served_model_name == "Qwen/Qwen2.5-VL-3B-Instruct"
    unknown = spec_for_endpoint(registry, "http://127.0.0.1:8000/v1/", "my-model")  # as OpenAI clients take it
    assert unknown.family == "auto" and unknown.controls == () and unknown.endpoint == "http://127.0.0.1:8000"
    other = spec_for_endpoint(registry, "http://127.0.0.1:8000", "my-model", family="internvl")
    assert other.family == "internvl" and other.controls == registry.get("internvl2.5-1b-mpo").controls
    borrowed = spec_for_endpoint(registry, "http://127.0.0.1:8000", "my-model", family="qwen2_5_vl")
    assert [c.kwarg for c in borrowed.controls] == ["min_pixels", "max_pixels", "videos_kwargs.max_pixels"]
    assert borrowed.default_mm_kwargs() == {}  # the entry's max_pixels default is not sent to another model
    with pytest.raises(RegistryError, match="endpoint must be an http"):
        spec_for_endpoint(registry, "gpu-box:8000", "my-model", family="llava")
    with pytest.raises(RegistryError, match="unknown family 'lava'"):
        spec_for_endpoint(registry, "http://127.0.0.1:8000", "my-model", family="lava")


def test_by_reference_leaves_out_the_bytes_of_known_parts_only():
    from vlm_demo.engine.openai_request import by_reference, media_uuids, prompt_body

    image, other = make_image(64, 48, seed=1), make_image(48, 64, seed=2)
    body = prompt_body("m", [{"role": "user", "content": [{"type": "image_pil", "image_pil": image},
                                                          {"type": "image_pil", "image_pil": other},
                                                          {"type": "text", "text": "Hi"}]}])
    first, second = media_uuids(body)
    assert len(first) == 64 and first != second
    again = prompt_body("m", [{"role": "user", "content": [{"type": "image_pil", "image_pil": image.copy()}]}])
    assert media_uuids(again) == (first,)  # by content
    assert by_reference(body, lambda uuid: False) is body
    lean = by_reference(body, lambda uuid: uuid == first)
    assert lean["messages"][0]["content"][0] == {"type": "image_url", "image_url": None, "uuid": first}
    assert lean["messages"][0]["content"][1:] == body["messages"][0]["content"][1:]
    assert body["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/png")  # left as it was


async def test_sent_media_goes_by_reference_per_path_and_options_and_again_with_bytes_on_a_400():
    from vlm_demo.engine.openai_request import prompt_body
    from vlm_demo.engine.remote_media import SentMedia, ServerRefusal

    def body(**kwargs):
        return prompt_body("m", [{"role": "user", "content": [{"type": "image_pil", "image_pil": make_image(64, 48)}]}],
                           kwargs)

    posted: list[bool] = []  # each post: whether it carried the bytes
    refuse_lean = False

    async def post(sent):
        carried = sent["messages"][0]["content"][0]["image_url"] is not None
        posted.append(carried)
        if refuse_lean and not carried:
            raise ServerRefusal("Cache miss", 400)
        return "ok"

    media = SentMedia(enabled=True)
    for path, options in (("/render", {}), ("/render", {}), ("/chat", {}), ("/render", {"max_pixels": 9})):
        assert await media.send(path, body(**options), post) == "ok"
    assert posted == [True, False, True, True]  # again to the same path with the same options only: by reference
    posted.clear()
    refuse_lean = True
    assert await media.send("/render", body(), post) == "ok"
    assert posted == [False, True]
    sent = body()
    assert media.lean("/chat", sent) is not sent  # the refusal at /render forgets nothing of /chat's
    assert media.lean("/render", sent) is not sent  # its bytes went again: held again
    off = SentMedia(enabled=False)
    off.remember("/render", sent)
    assert off.lean("/render", sent) is sent


def test_the_remote_engine_does_not_import_vllm():
    code = ("import sys, vlm_demo.engine.remote, vlm_demo.engine; "
            "assert not any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules), 'vllm imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


@pytest.mark.parametrize(("model", "expected"), [("tiny-qwen2.5-vl", "openai"), ("tiny-llava-1.5", "openai"),
                                                 ("tiny-internvl2.5", "string"), ("tiny-ovis2", "string")])
def test_content_format_of_the_servers_template(registry, settings, model, expected):
    """A remote entry's content format is vLLM's own detection run on the template the server sends (here
    the tiny model's template file, which the server would send); the same as the inspector tests see
    from the local engines (InternVL and Ovis are "string": their prompts need a placeholder per image)."""
    from vlm_demo.engine import EngineManager
    from vlm_demo.engine.remote_prompt import content_format as _content_format

    template = Path(EngineManager(settings).model_path(registry.get(model))) / "chat_template.jinja"
    assert _content_format(template.read_text()) == expected
    assert _content_format(None) == "unknown"


def test_the_servers_template_is_its_processors_where_the_checkpoint_is_here(registry, settings):
    """dots.ocr's tokenizer template takes string content, its processor's a list of parts, and a vLLM server renders
    with the processor's (``AutoProcessor`` first): the remote engine reads that one where the served checkpoint is a
    directory here (it showed "string" while the server rendered "openai"), else what ``/tokenizer_info`` sends."""
    from vlm_demo.engine import EngineManager
    from vlm_demo.engine.remote_prompt import content_format as _content_format
    from vlm_demo.engine.remote_prompt import served_chat_template

    root = EngineManager(settings).model_path(registry.get("tiny-dots.ocr"))
    info = {"chat_template": json.loads((Path(root) / "tokenizer_config.json").read_text())["chat_template"]}
    assert _content_format(info["chat_template"]) == "string"
    assert _content_format(served_chat_template(info, root)) == "openai"
    assert served_chat_template(info, "rednote-hilab/dots.ocr") == info["chat_template"]  # not here: the server's word
    assert served_chat_template({}, None) is None
