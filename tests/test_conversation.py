"""The one conversation state (pure): what a request carries and what the chat shows after each sequence of
Ask, Stop, error, Retry and Undo. The same sequences run through the real page in tests/test_app.py."""

from __future__ import annotations

from vlm_demo.conversation import Conversation, Exchange, chat_messages
from vlm_demo.service import Figures, Turn
from vlm_demo.ui.answer import stats_text


def ask(conversation: Conversation, text: str, answer: str = "", status: str = "streaming",
        reasoning: str = "") -> Conversation:
    asked = conversation.ask(Exchange(Turn("user", text), ("f.png", text)))
    return asked.with_last(answer=answer, status=status, reasoning=reasoning)


def sent(conversation: Conversation) -> list[tuple[str, str]]:
    return [(t.role, t.text) for t in conversation.turns()]


def test_stop_keeps_the_answer_as_shown_and_retry_answers_that_question():
    c = ask(ask(Conversation(), "u1", "a1", "done"), "u2", "a2 so f")  # Stop: left streaming
    assert sent(c.settled()) == [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2 so f")]
    assert chat_messages(c.settled())[-1]["content"] == "a2 so f\n\n*[stopped]*"
    before, again = c.retry()
    assert again.user.text == "u2" and sent(before) == [("user", "u1"), ("assistant", "a1")]
    assert again.status == "streaming" and again.answer == ""


def test_stop_then_undo_removes_the_stopped_exchange():
    c = ask(ask(Conversation(), "u1", "a1", "done"), "u2", "a2 so f")
    assert sent(c.undo()) == [("user", "u1"), ("assistant", "a1")]
    assert [m["role"] for m in chat_messages(c.undo())] == ["user", "assistant"]


def test_a_failed_answer_is_shown_not_sent_and_retry_answers_it():
    c = ask(ask(Conversation(), "u1", "a1", "done"), "u2", "half", "failed")
    c = c.with_last(note="the engine stopped")
    assert sent(c) == [("user", "u1"), ("assistant", "a1")]  # never two user messages in a row
    assert chat_messages(c)[-1]["content"] == "half\n\n*[failed: the engine stopped]*"
    before, again = c.retry()
    assert again.user.text == "u2" and len(before.exchanges) == 1


def test_two_retries_and_undo_on_an_empty_chat():
    c = ask(Conversation(), "u1", "a1", "done")
    for _ in range(2):
        before, again = c.retry()
        c = before.ask(again).with_last(answer="again", status="done")
        assert sent(c) == [("user", "u1"), ("assistant", "again")]
    assert Conversation().undo() == Conversation()
    try:
        Conversation().retry()
    except ValueError as exc:
        assert "nothing to retry" in str(exc)
    else:
        raise AssertionError("retry on an empty chat")


def test_reasoning_is_shown_apart_and_never_sent_back():
    c = ask(Conversation(), "u1", "", "streaming", reasoning="let me think")
    shown = chat_messages(c)
    assert shown[-1] == {"role": "assistant", "content": "let me think",
                         "metadata": {"title": "Reasoning", "status": "pending"}}
    c = c.with_last(answer="forty-two", status="done")
    shown = chat_messages(c)
    assert [m.get("metadata", {}).get("title") for m in shown] == [None, "Reasoning", None]
    assert shown[1]["metadata"]["status"] == "done" and shown[2]["content"] == "forty-two"
    assert sent(c) == [("user", "u1"), ("assistant", "forty-two")]


def test_the_stats_line_shows_cache_and_reasoning():
    line = stats_text(Figures(tokens=40, ttft_s=0.12, tokens_per_s=50.0, finish_reason="stop", prompt_tokens=421,
                            cached_tokens=256, reasoning_tokens=33))
    assert "reasoning 33 tokens" in line and "prompt 421 tokens, 256 from vLLM's prefix cache" in line


def test_every_wait_counts():
    """Issue 44: the stats line gives the wait the person had for the first token, split into the engine's start and
    the prefill (it said "waited 1.9 s for the engine to start · time to first token 28.50 s" after 30.6 s of
    "waiting for the engine"); a prefill says what the engine encodes and for how long; a streaming answer counts
    its tokens."""
    from vlm_demo.service import Prefilling
    from vlm_demo.ui.answer import generating_text
    from vlm_demo.ui.status import prefill_text

    waited = stats_text(Figures(tokens=64, ttft_s=28.5, tokens_per_s=12.0, finish_reason="length", wait_s=1.9))
    assert waited.startswith("64 tokens · first token after **30.40 s**: the engine's start 1.9 s + prefill 28.50 s")
    assert "time to first token **0.31 s**" in stats_text(Figures(tokens=3, ttft_s=0.31, finish_reason="stop"))
    assert prefill_text(Prefilling("tiny-deepseek-ocr", "7 views of 1 picture, 903 vision tokens, in a 960-token "
                                   "prompt", 12.4, 1.9)) == (
        "the engine's start 1.9 s, then prefill: the engine encodes 7 views of 1 picture, 903 vision tokens, in a "
        "960-token prompt · **12 s** so far")
    assert generating_text(Figures(tokens=37, tokens_per_s=12.25)) == "generating… **37** tokens · 12.2 tokens/s"


def test_a_readers_answer_shows_as_its_document_with_the_raw_answer_one_click_away():
    """dots.ocr's JSON cells as Markdown (the title a heading, the table its HTML) in place of the answer; the raw
    answer in a collapsed block under it; the raw answer, not the view, goes back to the model."""
    from vlm_demo.families.box_formats import DOTS_OCR

    raw = ('[{"bbox": [10, 20, 300, 60], "category": "Title", "text": "Quarterly report"}, '
           '{"bbox": [10, 80, 300, 200], "category": "Table", "text": "<table><tr><td>1</td></tr></table>"}]')
    exchange = Exchange(Turn("user", "Layout"), ("Layout",), answer=raw, status="done",
                        document=DOTS_OCR.document(raw))
    messages = chat_messages(Conversation((exchange,)))
    assert messages[1] == {"role": "assistant", "content": "# Quarterly report\n\n<table><tr><td>1</td></tr></table>"}
    assert messages[2]["metadata"]["title"] == "Raw answer" and raw in messages[2]["content"]
    assert sent(Conversation((exchange,))) == [("user", "Layout"), ("assistant", raw)]
