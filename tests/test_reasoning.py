"""Reasoning shown apart: a model entry's ``reasoning_parser`` (vLLM's own, as ``vllm serve
--reasoning-parser``) splits the streamed thinking from the answer, counts its tokens, and the next turn's
prompt holds only the answer. The tiny Qwen3-VL thinking entry's output is held by a structured-outputs
regex to what a Qwen3-VL Thinking model writes after its template's ``<think>\\n``: reasoning, ``</think>``,
answer.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from vlm_demo.cli import chat_text
from vlm_demo.errors import RegistryError
from vlm_demo.export import serve_command
from vlm_demo.engine import check_spec
from vlm_demo.registry import Sampling, parse_registry
from vlm_demo.service import ChatRequest, ChatService, Delta, Done, Failed, Turn

from .conftest import make_image

MODEL = "tiny-qwen3-vl-thinking"
REASONING, ANSWER = r"\n[a-z ]{5,30}\n", r"\n\n[a-z ]{5,30}"
REGEX = f"{REASONING}</think>{ANSWER}"
SEEDS = range(12)
"""With random weights the grammar's "</think>" comes either as the one </think> token (what a real model
writes) or byte by byte, which vLLM's parser reads as more reasoning (no split); about one seed in two
gives the token, so twelve seeds give it at least once on any machine but about one in 4,000."""


async def _chat(service: ChatService, request: ChatRequest) -> tuple[list[Delta], Done]:
    events = [e async for e in service.chat(request)]
    assert not [e for e in events if isinstance(e, Failed)], events
    done = events[-1]
    assert isinstance(done, Done)
    return [e for e in events if isinstance(e, Delta)], done


def _request(seed: int, turns: tuple[Turn, ...] | None = None) -> ChatRequest:
    turns = turns or (Turn("user", "What is in this picture?", {"image": (make_image(320, 320),)}),)
    return ChatRequest(MODEL, turns, sampling=Sampling(temperature=1.0, top_p=1.0, max_tokens=80, seed=seed,
                                                       regex=REGEX))


@pytest.mark.engine
async def test_reasoning_streams_apart_and_stays_out_of_the_next_prompt(service: ChatService, report):
    tokenizer = (await service.engines.get(service.registry.get(MODEL))).tokenizer

    def n_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    split = None
    for seed in SEEDS:
        deltas, done = await _chat(service, _request(seed))
        assert done.figures.finish_reason == "stop" and deltas
        if not done.answer:  # "</think>" spelled byte by byte: all of it is reasoning, as vllm serve reads it
            assert re.fullmatch(REGEX, done.reasoning)
            assert done.figures.reasoning_tokens == done.figures.tokens
            continue
        # The split: thinking text without the marker, the answer without tags; exact token counts (the tiny
        # tokenizer has no merges: one token a character, plus </think>, plus end-of-sequence).
        assert re.fullmatch(REASONING, done.reasoning) and re.fullmatch(ANSWER, done.answer), done
        assert done.figures.reasoning_tokens == n_tokens(done.reasoning) + 1
        assert done.figures.tokens == done.figures.reasoning_tokens + n_tokens(done.answer) + 1
        # Streamed: the reasoning grows while the answer stays empty, then the answer grows, reasoning fixed.
        first_answer = next(i for i, d in enumerate(deltas) if d.answer)
        assert first_answer > 1
        for before, after in zip(deltas, deltas[1:]):
            assert after.reasoning.startswith(before.reasoning) and after.answer.startswith(before.answer)
        assert all(not d.answer and d.reasoning for d in deltas[:first_answer])
        assert len({d.reasoning for d in deltas[:first_answer]}) > 1
        assert all(d.reasoning == done.reasoning for d in deltas[first_answer:])
        assert deltas[-1].answer == done.answer and "".join(d.text for d in deltas) == done.answer
        split = (seed, done)
        break
    assert split is not None, f"no seed of {list(SEEDS)} wrote the </think> token"
    seed, done = split
    report(f"reasoning split (seed {seed}): {done.figures.reasoning_tokens} of {done.figures.tokens} tokens reasoning")

    # The next turn keeps only the answer (the UI appends Turn("assistant", done.answer)), as the Qwen3
    # Thinking templates themselves drop earlier turns' reasoning; the prompt holds no trace of it.
    turns = (*_request(seed).turns, Turn("assistant", done.answer), Turn("user", "Why?"))
    prompt = (await service.inspect(ChatRequest(MODEL, turns))).prompt
    assert done.answer.strip() in prompt
    assert done.reasoning.strip() not in prompt and "</think>" not in prompt


@pytest.mark.engine
async def test_a_regex_vllm_cannot_compile_is_a_one_line_error(service: ChatService):
    request = _request(0)
    bad = ChatRequest(MODEL, request.turns, sampling=Sampling(max_tokens=8, regex="(unclosed"))
    events = [e async for e in service.chat(bad)]
    assert isinstance(events[-1], Failed) and "\n" not in events[-1].message
    assert MODEL in events[-1].message and "regex" in events[-1].message


def test_the_cli_prints_reasoning_apart():
    shown, out = 0, ""
    for delta in (Delta("", "", "\nlook"), Delta("", "", "\nlook at it\n"), Delta("\n\nA", "\n\nA", "\nlook at it\n"),
                  Delta(" cat", "\n\nA cat", "\nlook at it\n")):
        out += chat_text(delta, shown)
        shown = len(delta.reasoning)
    assert out == "[reasoning]\n\nlook at it\n\n[answer]\n\n\nA cat"
    assert chat_text(Delta("plain", "plain"), 0) == "plain"  # no reasoning parser: the answer alone


def test_registry_checks_the_reasoning_parser_name(tmp_path: Path):
    entry = "models:\n  - {name: t, label: T, family: qwen3_vl, tiny: true, reasoning_parser: %s}\n"
    assert parse_registry(entry % "qwen3", tmp_path / "m.yaml", check_spec).get("t").reasoning_parser == "qwen3"
    with pytest.raises(RegistryError) as err:
        parse_registry(entry % "qwen4", tmp_path / "m.yaml", check_spec)
    message = str(err.value)
    assert "reasoning_parser" in message and "'qwen4'" in message and "qwen3" in message and "deepseek_r1" in message
    assert "\n" not in message
    remote = ("models:\n  - {name: r, label: R, endpoint: 'http://h:8000', served_model_name: m, "
              "reasoning_parser: qwen3}\n")
    with pytest.raises(RegistryError, match="--reasoning-parser"):
        parse_registry(remote, tmp_path / "m.yaml")


def test_the_exported_serve_command_names_the_reasoning_parser(registry):
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    command = "\n".join(line for line in serve_command(registry.get(MODEL)).splitlines() if not line.startswith("#"))
    argv = shlex.split(command.replace("\\\n", " "))[3:]  # after "vllm serve MODEL" (its comment line aside)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "x", *argv])
    assert args.reasoning_parser == "qwen3"
    assert "--reasoning-parser" not in serve_command(registry.get("tiny-qwen3-vl"))
