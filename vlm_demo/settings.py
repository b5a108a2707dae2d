"""Every tunable number of the app in one place, each overridable by an environment variable.

``Settings.from_env()`` reads ``VLM_DEMO_<FIELD>`` (upper case) for each field below.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vlm-demo"


ENCODED_IMAGES_KEPT = 64
"""PNG encodings (data URLs, overlay pictures) kept in memory per process, by image content: each turn
re-sends every earlier image of the conversation, which then costs a hash instead of an encode."""
OVERLAY_JPEG_QUALITY = 90
"""The expansion pictures (a page or picture with its grid drawn) are JPEGs of this quality: PNG took 31 ms a page
at 144 dpi (1190x1684), 1.3 s of the 2.1 s a 40-page document's panels took; JPEG takes 4 ms."""

PAGE_RENDERS_KEPT = 256
"""Sessions whose last answer's render the page keeps for its panels (``/panels``): the most recently used;
an older session's panels come back empty."""

REMOTE_MEDIA_REMEMBERED = 4096
"""Pictures and clips a remote engine remembers having sent to its server (per endpoint path, the most recent):
these go again by their content hash alone, without the bytes (``Settings.remote_media_by_reference``)."""

ENGINES_MEMORY_SHARE = 0.4
"""The share of this machine's memory the engines kept warm may take together on CPU, unless
``Settings.engines_memory_gib`` says otherwise (24 GiB: 9.6 GiB, five tiny models' engines)."""

ATTACHMENTS_CHECKED = 256
"""Files attached on the page whose check (as a question would take them) is remembered per process, by path: the
message box reports every keystroke, and each file is checked once."""

RENDERERS_KEPT = 4
"""vLLM renderers without an engine kept per process (the most recently used): Inspect only, Compare and the
CLI's ``inspect`` render with one while no engine of that model runs, and building one takes seconds."""

WAITING_EVERY_S = 1.0
"""How often a request waiting for its model's engine to start says where the start stands (the page's stats
line counts the seconds with it)."""

STATUS_EVERY_S = (1.0, 5.0)
"""How often the page asks where its model's engine stands: while it starts (its phase and seconds), and
otherwise (another tab's switch may have stopped it)."""

VIDEO_NUM_FRAMES = 16
"""Frames sampled from each video unless the request says otherwise, for families sampled by frame count (the
page's ``num_frames`` slider starts here; vLLM's own default, 32, would put a 4-s clip over a tiny InternVL's
8192-token context)."""
VIDEO_FPS = 2.0
"""Frames per second sampled from each video unless the request says otherwise, for families sampled by rate
(Qwen-VL): the default of vLLM's Qwen video loaders and of the Qwen processors."""

MAX_TOKENS_SLIDER = 2048
"""The top of the page's max_tokens slider for an entry that names no context window (else the window: a reader's page
of text takes thousands)."""

DOCUMENT_DPI = 144
"""The resolution a document's pages are rasterised at unless the request or the model's family says otherwise:
docling's (a scale of 2.0) and DeepSeek-OCR's own scripts'; an A4 page becomes 1191 x 1684 px."""
DOCUMENT_DPI_RANGE = (72, 300)
"""The resolutions a person may choose for a document's pages (72: a PDF's own points; 300: print)."""
DOCUMENT_PAGES_KEPT = 256
"""Rasterised pages kept per process, by (document digest, page, DPI): moving another control, asking again or
reading the next page range rasterises nothing twice."""


@dataclass(frozen=True)
class Settings:
    """Limits and paths; see the README's settings table."""

    models_file: Path = _ROOT / "models.yaml"
    """The model registry file."""
    cache_dir: Path = field(default_factory=_default_cache)
    """Where tiny offline models are built (and other caches live)."""
    cpu_kv_cache_gib: float = 1.0
    """KV cache size of a CPU engine, in GiB (vLLM's ``VLLM_CPU_KVCACHE_SPACE``)."""
    max_engines: int = 4
    """How many engines may be alive at once (those of recently used models stay up, warm, while they fit
    ``engines_memory_gib``); starting one more stops the least recently used one."""
    engines_memory_gib: float = 0.0
    """Memory the engines kept warm may take together on CPU, in GiB (each engine's KV cache and processes, as
    measured at its start); 0: ``ENGINES_MEMORY_SHARE`` of this machine's. On a GPU the engines' own
    ``gpu_memory_utilization`` shares count instead, up to the whole GPU. A new engine that does not fit stops the
    least recently used ones first."""
    engine_start_timeout_s: float = 600.0
    """How long an engine may take to start before the start counts as failed."""
    session_nice: int = 19
    """On a CPU machine, the nice value ``python app.py`` gives its session (Linux autogroup: the app, its engines and
    what else that terminal runs). vLLM's engine processes busy-wait, and a browser on the same machine (its own
    session) got no CPU for seconds while an answer streamed: a 2048-token answer on a 390-px page held Chromium's
    main thread 2-6 s at 0, never over 200 ms at 10 or 19 (an engine's start beside it: tasks of 570 ms at 10). The
    engines still take every cycle nobody else wants. 0: as started."""
    start_at_launch: bool = True
    """Start the start-up model's engine as the page comes up (in the background: the page is served at once), so a
    person who asks right away waits only for what is left of the start; off: at the first question."""
    mcp_server: bool = True
    """Serve the MCP tools for agents (what a document will cost a model, the models and their settings) at
    ``/gradio_api/mcp`` of the page's server; off: the page and its API only."""
    stop_grace_s: float = 4.0
    """When the app is stopped (SIGTERM, Ctrl-C): how long the engines (together), and then the web server, may take
    to end on their own, all within this from the signal; an engine still running after that is killed, with vLLM's
    "force killing" in the log. One forked engine ends in about 1 s here; two warm engines stopping together on 2
    cores took over 2 s (force killed at 2.0), and the app exited in 3 s with none killed at 5.0. Under 5 s: a
    stopped app exits within 5 s (CI, 5.0: the page's server, held by a client's open connection, took the whole
    grace again after the engines, 6.2 s in all)."""
    max_images_per_turn: int = 4
    """Images one user message may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    max_images_per_conversation: int = 8
    """Images a whole conversation may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    max_document_pages: int = 40
    """Pages read from one document: all of its pages up to this many by default (the first ones), and at most
    this many when the request names pages; each page is one image to vLLM."""
    max_document_page_count: int = 2000
    """Largest document, in pages: a file with more is refused before any page is read."""
    max_turns: int = 40
    """Messages a conversation may hold (user and assistant together, the new question included)."""
    allowed_image_formats: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
    """Image formats Pillow may decode (checked from the file's header before any pixels are read)."""
    max_upload_bytes: int = 20_000_000
    """Largest uploaded file (image, document or embeddings), in bytes."""
    max_image_pixels: int = 40_000_000
    """Largest decoded image, in pixels (Pillow's decompression-bomb guard uses this too)."""
    max_video_bytes: int = 50_000_000
    """Largest video, in bytes (an uploaded file, or the payload of a ``data:video/...`` URL)."""
    max_video_seconds: float = 120.0
    """Longest video, in seconds (its frame count over its frame rate, as the container says)."""
    max_video_frame_pixels: int = 3840 * 2160
    """Largest video frame, width times height (4K UHD passes; 7680x4320 is refused)."""
    max_video_frames: int = 64
    """Most frames sampled from one video (the page's ``num_frames`` slider goes up to this)."""
    max_video_fps: float = 8.0
    """Highest rate, in frames per second, at which frames are sampled from a video."""
    max_video_decode_s: float = 10.0
    """Longest time checking one video may take (every frame is decoded once, without colour conversion)."""
    max_videos_per_turn: int = 1
    """Videos one user message may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    max_videos_per_conversation: int = 2
    """Videos a whole conversation may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    allowed_video_formats: tuple[str, ...] = ("mp4", "webm", "mov", "mkv")
    """Video containers accepted (sniffed from the file's header, not its name): mp4, webm, mov, mkv."""
    max_audio_clips_per_turn: int = 2
    """Audio clips one user message may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    max_audio_clips_per_conversation: int = 4
    """Audio clips a whole conversation may carry (the model's ``limit_mm_per_prompt`` may be lower)."""
    max_audio_bytes: int = 25_000_000
    """Largest audio clip, in bytes (an uploaded or recorded file, or the payload of a ``data:audio/...`` URL)."""
    max_audio_seconds: float = 300.0
    """Longest clip, in seconds (the longest any audio model served here hears: Qwen2.5-Omni's 300 s; a model
    whose own cap is shorter hears its first part, and the expansion says what it dropped)."""
    max_audio_channels: int = 8
    """Most channels in a clip (7.1 surround; a clip is mixed to mono before a model hears it)."""
    min_audio_rate: int = 8_000
    """Lowest sample rate taken, in Hz (telephone speech)."""
    max_audio_rate: int = 192_000
    """Highest sample rate taken, in Hz (studio recordings)."""
    max_text_chars: int = 8_000
    """Longest user message or system prompt, in characters."""
    url_fetch: bool = False
    """Whether image URLs are fetched at all (``data:`` URLs are decoded whatever this says)."""
    url_allowed_hosts: tuple[str, ...] = ()
    """Host names image URLs may point at (exact, case-insensitive); empty means none."""
    url_max_bytes: int = 10_000_000
    """Largest image body fetched from a URL, in bytes."""
    url_timeout_s: float = 10.0
    """Longest time one URL fetch may take in all (connect, redirects, body)."""
    url_max_redirects: int = 3
    """Redirects followed per URL, each checked like the first URL (0 refuses redirects)."""
    queue_concurrency: int = 8
    """Chat requests the UI lets run at once on one engine (vLLM batches them)."""
    queue_max_size: int = 32
    """Requests the UI queue holds before it answers "busy"."""
    queue_poll_s: float = 0.005
    """How often the page's queue looks for a free slot while events wait for one (``ui/server.py``; while it has no
    event it sleeps until one is pushed, where Gradio's own loop looked every 1 ms: 41-43 ms of CPU a second idle)."""
    ui_update_interval_s: float = 0.25
    """Shortest time between two streamed UI updates (the first token shows at once). Each update costs the
    Gradio server several milliseconds of CPU: 0.25 s used 30-40 % less app CPU per answer than 0.05 s at 8 users
    on a 2-core machine, and half as much at 1 user (docs/benchmark.md)."""
    switch_wait_s: float = 30.0
    """How long a model switch waits for the running engine's requests to finish before refusing."""
    remote_connect_timeout_s: float = 5.0
    """How long connecting to a remote vLLM server may take."""
    remote_timeout_s: float = 120.0
    """Longest wait for a remote server's answer (for a streamed answer: between two chunks)."""
    remote_media_by_reference: bool = True
    """Whether a picture or clip a remote vLLM server has processed goes again (the next turn, the answer after the
    panels' render) as its content hash (``uuid``) alone, without the bytes: vLLM takes it from its processor
    cache, and a server that no longer holds it gets the bytes at once (docs/benchmark.md, remote turns)."""
    hub_timeout_s: float = 10.0
    """Longest wait for a Hugging Face Hub metadata answer (a repository's file list, a file's headers)."""

    def media_limits(self, modality: str) -> tuple[int, int]:
        """Items of ``modality`` one message and one conversation may carry (0, 0 for an unknown modality)."""
        if modality == "image":
            return self.max_images_per_turn, self.max_images_per_conversation
        if modality == "video":
            return self.max_videos_per_turn, self.max_videos_per_conversation
        if modality == "audio":
            return self.max_audio_clips_per_turn, self.max_audio_clips_per_conversation
        return 0, 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Defaults, overridden by ``VLM_DEMO_<FIELD>`` variables."""
        env = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            raw = env.get(f"VLM_DEMO_{f.name.upper()}")
            if raw is None:
                continue
            try:
                values[f.name] = _parse(raw, getattr(cls(), f.name))
            except ValueError as exc:
                from .errors import VlmDemoError

                raise VlmDemoError(f"VLM_DEMO_{f.name.upper()}={raw!r}: {exc}") from None
        return cls(**values)


def _parse(raw: str, default: object) -> object:
    """``raw`` as the type of ``default``: bools from 1/0/true/false/yes/no/on/off, tuples from commas."""
    if isinstance(default, bool):
        if raw.strip().lower() not in _BOOLS:
            raise ValueError(f"expected one of {', '.join(_BOOLS)}")
        return _BOOLS[raw.strip().lower()]
    if isinstance(default, tuple):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if isinstance(default, Path):
        return Path(raw)
    return type(default)(raw)


_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
