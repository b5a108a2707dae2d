"""Export a request as what ``vllm serve`` takes: OpenAI chat-completions JSON (with
``mm_processor_kwargs``), a curl command and a Python ``openai`` snippet."""

from __future__ import annotations

import json
import shlex
from typing import Any

from . import profile
from .engine.openai_request import prompt_body, request_body
from .engine.runs import kept_tags
from .registry import ModelSpec
from .service import ChatRequest, sent_media_io, to_openai_messages
from .settings import Settings


def chat_completions_body(request: ChatRequest, model: ModelSpec | profile.Profile, stream: bool = True,
                          settings: Settings | None = None) -> dict[str, Any]:
    """The OpenAI-compatible request body that replays ``request`` against ``vllm serve``: the body the app's
    remote engine posts (``engine.openai_request``), sampling fields (``ignore_eos`` too) included; image
    embeddings, which JSON cannot carry, are said to be left out."""
    found = profile.profile_of(model)
    spec = found.spec
    sampling = request.sampling or spec.sampling
    prompt = prompt_body(spec.served_model_name or spec.repo or spec.path or spec.name, to_openai_messages(request),
                         found.mm_processor_kwargs(request.mm_kwargs),
                         sent_media_io(request, found, settings or Settings()), leave_out_embeds=True)
    return request_body(prompt, sampling, keep_special_tokens=bool(kept_tags(found.adapter)), stream=stream)


LOCAL_SERVER = "http://localhost:8000"
"""Where the exported request goes for a model the app runs itself: a ``vllm serve`` started as shown."""


def cli_flags(engine_kwargs: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Engine keyword arguments as ``vllm serve`` command-line (flag, value) pairs, value None for a
    switch (the one such conversion: the export and the tests' servers use it)."""
    flags: list[tuple[str, str | None]] = []
    for key, value in engine_kwargs.items():
        name = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append((name if value else "--no-" + name[2:], None))
        elif isinstance(value, (list, tuple)):  # --logits-processors CLASS (vLLM: nargs="+"; entries name one)
            flags.append((name, " ".join(str(v) for v in value)))
        elif value is not None:
            flags.append((name, json.dumps(value) if isinstance(value, dict) else str(value)))
    return flags


def frontend_flags(spec: ModelSpec) -> list[tuple[str, str | None]]:
    """The ``vllm serve`` flags of the server's own front end (no ``AsyncEngineArgs``) the entry needs: its chat
    template's content format where the entry sets one."""
    fmt = spec.chat_template_content_format
    return [] if fmt == "auto" else [("--chat-template-content-format", fmt)]


def serve_command(model: ModelSpec | profile.Profile, model_dir: str | None = None) -> str:
    """The ``vllm serve`` command the exported request is meant for (for an endpoint entry: the server
    it already goes to). ``model_dir``: where a tiny entry's files were built (a registry name is nothing a
    server can load); it is served under the entry's name, which the exported request names."""
    from .engine.startup import serve_kwargs

    found = profile.profile_of(model)
    spec = found.spec
    if spec.remote:
        return (f"# {spec.endpoint} serves {spec.served_model_name}; the controls need it started with "
                "--trust-request-mm-kwargs")
    kwargs = {k: v for k, v in serve_kwargs(found).items() if not (k == "load_format" and spec.tiny)}
    kwargs["reasoning_parser"] = spec.reasoning_parser  # the server splits reasoning as the app does (None: no flag)
    if spec.tiny:
        args = [f"vllm serve {shlex.quote(model_dir or f'<the {spec.name} directory>')}",
                f"--served-model-name {shlex.quote(spec.name)}", "--load-format dummy", "--trust-request-mm-kwargs"]
    else:
        args = [f"vllm serve {spec.repo or spec.path}", "--trust-request-mm-kwargs"]
    args += [flag if value is None else f"{flag} {shlex.quote(value)}"
             for flag, value in [*cli_flags(kwargs), *frontend_flags(spec)]]
    sizing = kwargs.get("mm_processor_kwargs")
    why = (f"# --mm-processor-kwargs sizes the encoder cache of the server for the largest values the page offers "
           f"({', '.join(f'{k}={json.dumps(v)}' for k, v in sizing.items())}), so any value fits; each request sends "
           "its own in mm_processor_kwargs (request.json)\n") if sizing else ""
    return why + " \\\n  ".join(args)


PRINTABLE_NOTE = ("# vlm-demo restricted this random-weight model to printable tokens (allowed_token_ids); "
                  "vllm serve samples from every token")
"""What the exported snippets say for a model whose in-app answers are restricted to printable tokens."""


def printable_note(spec: ModelSpec) -> str:
    """``PRINTABLE_NOTE`` and a newline where the app restricts ``spec`` to printable tokens, else ""."""
    from .engine.renderer import printable_only

    return PRINTABLE_NOTE + "\n" if printable_only(spec) else ""


def curl_command(spec: ModelSpec) -> str:
    """curl that posts the exported JSON (saved as request.json) to the model's server; the API key, if
    the entry names one, is read from its environment variable, never written out."""
    auth = f" \\\n  -H \"Authorization: Bearer ${spec.api_key_env}\"" if spec.api_key_env else ""
    return (printable_note(spec) + f"curl -sN {spec.endpoint or LOCAL_SERVER}/v1/chat/completions \\\n"
            f"  -H 'Content-Type: application/json'{auth} \\\n  -d @request.json")


def _client_parts(body: dict[str, Any], spec: ModelSpec, indent: str) -> tuple[str, str, str, str]:
    """What an exported ``openai`` snippet needs of a body: its imports, the API key's expression, and the ``seed``
    and ``extra_body`` arguments (vLLM's own fields) at ``indent``."""
    extras = [key for key in ("mm_processor_kwargs", "media_io_kwargs", "ignore_eos", "structured_outputs",
                              "vllm_xargs", "skip_special_tokens") if key in body]
    extra = (f"{indent}extra_body={{" + ", ".join(f'"{key}": body["{key}"]' for key in extras) + "}," if extras else "")
    seed = f'{indent}seed=body["seed"],' if "seed" in body else ""
    imports = "import json\nimport os\n" if spec.api_key_env else "import json\n"
    api_key = f'os.environ["{spec.api_key_env}"]' if spec.api_key_env else '"EMPTY"'
    return imports, api_key, seed, extra


def python_snippet(body: dict[str, Any], spec: ModelSpec) -> str:
    """An ``openai`` client snippet that sends the exported JSON (saved as request.json) to the model's server."""
    imports, api_key, seed, extra = _client_parts(body, spec, "\n    ")
    reasoning = ("\n    thinking = getattr(chunk.choices[0].delta, \"reasoning\", None)  # vLLM's reasoning field"
                 "\n    if thinking:\n        print(thinking, end=\"\", flush=True)" if spec.reasoning_parser else "")
    return printable_note(spec) + f'''{imports}from openai import OpenAI

body = json.load(open("request.json"))
client = OpenAI(base_url="{spec.endpoint or LOCAL_SERVER}/v1", api_key={api_key})
stream = client.chat.completions.create(
    model=body["model"],
    messages=body["messages"],
    max_tokens=body["max_tokens"],
    temperature=body["temperature"],
    top_p=body["top_p"],{seed}
    stream=True,{extra}
)
for chunk in stream:{reasoning}
    print(chunk.choices[0].delta.content or "", end="", flush=True)
'''


def pages_snippet(bodies: list[dict[str, Any]], spec: ModelSpec, replay: str) -> str:
    """A document read page by page as a runnable script: request.json holds one body per page, sent together (the
    server batches them) with the ``openai`` client, the answers printed in page order; ``replay``: the same from
    this app's command line."""
    imports, api_key, seed, extra = _client_parts(bodies[0], spec, "\n        ")
    return printable_note(spec) + f'''# {len(bodies)} pages, each its own request, sent together; the same from vlm-demo:
# {replay}
{imports}from concurrent.futures import ThreadPoolExecutor

from openai import OpenAI

bodies = json.load(open("request.json"))  # one request body per page, in page order
client = OpenAI(base_url="{spec.endpoint or LOCAL_SERVER}/v1", api_key={api_key})


def ask(body):
    answer = client.chat.completions.create(
        model=body["model"],
        messages=body["messages"],
        max_tokens=body["max_tokens"],
        temperature=body["temperature"],
        top_p=body["top_p"],{seed}{extra}
    )
    return answer.choices[0].message.content


with ThreadPoolExecutor(len(bodies)) as pool:
    for page, text in enumerate(pool.map(ask, bodies), 1):
        print(f"--- request {{page}} of {{len(bodies)}} ---\\n{{text}}\\n")
'''
