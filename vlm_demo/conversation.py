"""One conversation state: the exchanges of a chat, from which both the request's turns and the chat
display are derived (pure functions, no UI or engine).

An exchange is a user message and what became of it: answered, stopped (the answer as far as it was
shown), failed (the engine stopped mid-answer) or still streaming. Retry regenerates the last exchange's
user message; Undo removes the last exchange; whatever happened before, the two views stay in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .service import Figures, Turn

Status = Literal["streaming", "done", "stopped", "failed"]


@dataclass(frozen=True)
class Exchange:
    """A user message and what became of it."""

    user: Turn
    """The message as the model gets it (text and decoded media)."""
    shown: tuple[Any, ...] = ()
    """The message as the chat shows it: uploaded file paths, then the text (with any image URLs)."""
    answer: str = ""
    """The answer as far as it was shown (without reasoning)."""
    reasoning: str = ""
    """The model's reasoning, shown apart and never sent back."""
    status: Status = "streaming"
    """Where the answer stands."""
    note: str = ""
    """Why a failed answer failed."""
    stats: Figures | None = None
    """The answer's figures, once it ended by itself."""
    figures: tuple[str, ...] = ()
    """The answer's boxes and points drawn on the picture they refer to (a picture file), where the model's family
    has a box format and the answer holds some; a document read page by page: each page's with boxes, in page
    order."""
    document: str = ""
    """A document reader's answer as the document it describes (Markdown; ``Grounding.document``), shown in place of
    the answer, whose raw text stays one click away (a collapsed block under it) and is what goes back to the
    model; "" for other answers."""

    @property
    def sent_back(self) -> bool:
        """Whether later requests include this exchange: answered or stopped ones do; a failed answer
        (or one still streaming) would leave two user messages in a row, which templates refuse."""
        return self.status in ("done", "stopped")


@dataclass(frozen=True)
class Conversation:
    """The chat: its exchanges, oldest first."""

    exchanges: tuple[Exchange, ...] = field(default_factory=tuple)
    """Every exchange shown, in order."""

    def settled(self) -> Conversation:
        """The conversation with an answer left streaming (its request was stopped or its tab closed)
        marked stopped, as far as it was shown."""
        if self.exchanges and self.exchanges[-1].status == "streaming":
            return self.with_last(status="stopped")
        return self

    def turns(self) -> tuple[Turn, ...]:
        """The turns a request after these exchanges carries before its own question."""
        turns: list[Turn] = []
        for exchange in self.exchanges:
            if exchange.sent_back:
                turns += [exchange.user, Turn("assistant", exchange.answer)]
        return tuple(turns)

    def ask(self, exchange: Exchange) -> Conversation:
        """A new exchange at the end."""
        return Conversation((*self.settled().exchanges, exchange))

    def retry(self) -> tuple[Conversation, Exchange]:
        """The conversation without its last exchange, and that exchange's question asked afresh."""
        conversation = self.settled()
        if not conversation.exchanges:
            raise ValueError("nothing to retry yet")
        last = conversation.exchanges[-1]
        return Conversation(conversation.exchanges[:-1]), Exchange(last.user, last.shown)

    def undo(self) -> Conversation:
        """The conversation without its last exchange (unchanged when empty)."""
        return Conversation(self.settled().exchanges[:-1])

    def with_last(self, **changes: Any) -> Conversation:
        """The conversation with its last exchange changed."""
        return Conversation((*self.exchanges[:-1], replace(self.exchanges[-1], **changes)))


MARKS = {"stopped": "stopped", "failed": "failed"}
"""How the chat marks an answer that did not end by itself (words, not symbols: a symbol the reader's fonts lack
shows as an empty box)."""

def no_answer_note(stats: Figures | None) -> str:
    """The note on a finished answer that is all reasoning."""
    if stats is not None and stats.finish_reason == "length":
        return f"no answer after the reasoning: all {stats.tokens} tokens went to thinking (raise max_tokens)"
    return "no answer after the reasoning: the model ended there"


def chat_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """The chat display (Gradio's messages format): each exchange's message, its reasoning as a
    collapsible block, its answer, and a mark on a stopped or failed answer."""
    messages: list[dict[str, Any]] = []
    for exchange in conversation.exchanges:
        messages.append({"role": "user", "content": [*({"path": p} for p in exchange.shown[:-1]),
                                                     *exchange.shown[-1:]] or exchange.user.text})
        if exchange.reasoning:
            done = exchange.status != "streaming" or bool(exchange.answer)
            messages.append({"role": "assistant", "content": exchange.reasoning,
                             "metadata": {"title": "Reasoning", "status": "done" if done else "pending"}})
        text = exchange.document or exchange.answer
        if exchange.status in MARKS:
            mark = MARKS[exchange.status] + (f": {exchange.note}" if exchange.note else "")
            text = f"{text}\n\n*[{mark}]*" if text else f"*[{mark}]*"
        elif exchange.status == "done" and exchange.reasoning and not text.strip():
            text = f"*[{no_answer_note(exchange.stats)}]*"
        if text or not exchange.reasoning:
            messages.append({"role": "assistant", "content": text})
        if exchange.document and exchange.answer:  # the reader's raw answer, one click away
            messages.append({"role": "assistant", "content": f"~~~~text\n{exchange.answer}\n~~~~",
                             "metadata": {"title": "Raw answer", "status": "done"}})
        for figure in exchange.figures:
            messages.append({"role": "assistant", "content": {"path": figure}})
    return messages
