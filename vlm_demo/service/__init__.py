"""The chat service: one request in, a stream of typed events out (UI -> ``ChatService.chat`` -> engine ->
``Rendered``, ``Delta``..., then ``Done`` or ``Failed`` -> UI).

``asking``: what a front end was asked, made the one request; ``requests``: the request and its events, and the
conversation as OpenAI chat messages; ``checks``: a request
checked before anything is rendered; ``detect``: Detect mode; ``pages``: a document read page by page; ``chat``:
``ChatService``.
"""

from .asking import Ask, Source, ask_request, ask_turn, documents_of, read_turn, request_of
from .chat import ChatService
from .checks import MEDIA_IO_KEYS, check_media_io, check_mm_kwargs, check_request, sent_media_io, video_sampling
from .detect import detect_request, detect_sampling, grounding_of
from .pages import composed, page_requests
from .requests import (ChatRequest, Delta, Done, Event, Failed, Figures, PageAnswer, Prefilling, Rendered, Turn,
                       Waiting, to_openai_messages)

__all__ = ["MEDIA_IO_KEYS", "Ask", "Source", "ask_request", "ask_turn", "documents_of", "read_turn", "request_of",
           "ChatRequest", "ChatService", "Delta", "Done", "Event", "Failed", "Figures", "PageAnswer", "Prefilling",
           "Rendered", "Turn", "Waiting", "composed", "page_requests", "check_media_io", "check_mm_kwargs", "check_request", "detect_request", "detect_sampling",
           "grounding_of", "sent_media_io", "to_openai_messages", "video_sampling"]
