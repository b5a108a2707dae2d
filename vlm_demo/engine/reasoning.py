"""Reasoning shown apart: vLLM's own reasoning parser on one streamed answer.

``ReasoningSplit`` feeds each engine delta to the parser that ``vllm serve --reasoning-parser NAME``
composes for a streamed chat completion (``ParserManager.get_parser`` -> ``Parser.parse_delta``), so the
thinking text and the answer split exactly where that server splits them, and counts the reasoning
tokens from the generated token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import EngineStartError
from ..registry import ModelSpec


def check_parser(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is one of vLLM's reasoning parsers (``ReasoningParserManager``)."""
    from vllm.reasoning import ReasoningParserManager

    known = ReasoningParserManager.list_registered()
    if name not in known:
        raise ValueError(f"unknown reasoning parser {name!r}; vLLM's: {', '.join(known)}")


def check_spec(spec: ModelSpec) -> None:
    """What the engine layer checks of an entry as ``models.yaml`` is read (``ValueError``): its reasoning parser is
    one of vLLM's."""
    if spec.reasoning_parser is not None:
        try:
            check_parser(spec.reasoning_parser)
        except ValueError as exc:
            raise ValueError(f"reasoning_parser: {exc}") from None


def reasoning_parser_class(name: str, tokenizer: Any, model: str) -> Any:
    """vLLM's parser class for reasoning parser ``name`` (no tool parser), checked against the model's
    tokenizer as ``vllm serve`` checks it at start-up; ``EngineStartError`` with the reason otherwise."""
    from vllm.parser.parser_manager import ParserManager

    try:
        check_parser(name)
    except ValueError as exc:
        raise EngineStartError(str(exc)) from None
    try:
        return ParserManager.get_parser(reasoning_parser_name=name, tokenizer=tokenizer, model_name=model)
    except (TypeError, ValueError, KeyError) as exc:
        raise EngineStartError(" ".join(str(exc).split())) from None


class ReasoningSplit:
    """One streamed answer split into reasoning and answer text by vLLM's reasoning parser."""

    def __init__(self, parser_class: Any, tokenizer: Any, model_config: Any):
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        self._parser = parser_class(tokenizer, None, chat_template_kwargs={}, model_config=model_config)
        # The request the parser reads (include_reasoning, tool_choice), adjusted as the server adjusts it.
        self._request = self._parser.adjust_request(ChatCompletionRequest(model="", messages=[], stream=True))
        self._ended: bool | None = None  # None until the prompt is known

    @property
    def skip_special_tokens(self) -> bool:
        """What the parser needs of detokenization (parsers that read marker tokens as text turn it off)."""
        return bool(self._request.skip_special_tokens)

    def feed(self, text: str, token_ids: Sequence[int], prompt_token_ids: Sequence[int] | None,
             finished: bool) -> tuple[str, str, int]:
        """One engine delta in: (reasoning text, answer text, reasoning tokens) it adds. ``prompt_token_ids``
        is needed with the first delta (a prompt may already have closed the reasoning)."""
        if self._ended is None:  # a prompt that closed the reasoning, or a parser that starts in the answer
            self._ended = self._parser.is_reasoning_end([]) or (
                prompt_token_ids is not None and self._parser.is_reasoning_end(list(prompt_token_ids)))
        delta = self._parser.parse_delta(text, list(token_ids), self._request,
                                         list(prompt_token_ids) if prompt_token_ids is not None else None,
                                         finished=finished)
        reasoning_tokens = 0
        if not self._ended:  # exact from the ids: each token up to and including the one that ends reasoning
            new = list(token_ids)
            # The parsers' end check scans back to an end or start marker; the earlier output holds no end
            # marker (the reasoning is still open), so the new ids alone decide it, in time linear overall.
            for k in range(1, len(new) + 1):
                reasoning_tokens += 1
                if self._parser.is_reasoning_end(new[:k]):
                    self._ended = True
                    break
        if delta is None:
            return "", "", reasoning_tokens
        return delta.reasoning or "", delta.content or "", reasoning_tokens
