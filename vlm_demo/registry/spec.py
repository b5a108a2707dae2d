"""The registry's types: one model entry (``ModelSpec``) with its engine arguments, sampling and controls, each
checked as it is built (pydantic, unknown keys refused)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, StrictBool, StrictInt, model_validator
from pydantic.dataclasses import dataclass

_STRICT = ConfigDict(extra="forbid")
RANDOM_WEIGHTS = "random weights"
AUTO = "auto"
"""The ``family:`` value that means: the adapter matching the checkpoint's ``model_type``, else generic."""


@dataclass(frozen=True, config=_STRICT)
class ControlSetting:
    """One per-request processor setting the page offers: a slider (int) or a checkbox (bool)."""

    kwarg: str
    """vLLM ``mm_processor_kwargs`` name the control sets (e.g. ``max_pixels``, ``do_pan_and_scan``)."""
    label: str
    """Text shown beside the control."""
    default: StrictInt | StrictBool | None = None
    """Value sent until the user moves the control; None: nothing is sent until then, so the checkpoint's
    own processor config applies (as with ``vllm serve``). Its type makes a checkbox (bool) or a slider."""
    min: int | None = None
    """Smallest value (sliders)."""
    max: int | None = None
    """Largest value (sliders); the engine starts with it when the kwarg sizes its encoder cache."""
    step: int = 1
    """Slider step."""

    @property
    def kind(self) -> Literal["int", "bool"]:
        """``bool`` for a checkbox (a bool default, or no range), ``int`` for a slider."""
        return "bool" if isinstance(self.default, bool) or (self.default is None and self.min is None) else "int"

    @property
    def initial(self) -> int | bool:
        """Where the control starts on the page: its default, else (the checkpoint's own value applies)
        off for a checkbox and the top of a slider's range."""
        if self.default is not None:
            return self.default
        return False if self.kind == "bool" else int(self.max or 0)

    @model_validator(mode="after")
    def _check_range(self) -> ControlSetting:
        if self.kind == "bool":
            if self.min is not None or self.max is not None:
                raise ValueError("a checkbox (bool default) takes no min or max")
            return self
        if self.min is None or self.max is None:
            raise ValueError("a slider needs min and max")
        if self.default is not None and not self.min <= self.default <= self.max:
            raise ValueError(f"need min <= default <= max (got {self.min}, {self.default}, {self.max})")
        if self.step <= 0:
            raise ValueError("step must be positive")
        return self

    def check(self, value: object) -> None:
        """Raise ``ValueError`` unless ``value`` is of this control's type and within its range."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{self.kwarg} must be true or false (got {value!r})")
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{self.kwarg} must be a whole number (got {value!r})")
        if not (self.min or 0) <= value <= (self.max or 0):
            raise ValueError(f"{self.kwarg}={value} is outside {self.min}..{self.max}")


@dataclass(frozen=True, config=_STRICT)
class Sampling:
    """Default sampling settings of a model (the user may change them per request)."""

    temperature: float = Field(0.7, ge=0.0, le=2.0)
    """Sampling temperature; 0 is greedy."""
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_tokens: int = Field(256, ge=1)
    """Most tokens one answer may have."""
    seed: int | None = None
    """Fixed seed for reproducible answers, or None."""
    ignore_eos: bool = False
    """Keep generating past end-of-sequence (benchmarks use it for fixed-length answers)."""
    regex: str | None = None
    """vLLM structured outputs regex (``StructuredOutputsParams(regex=...)``): the whole generated text
    must match it, reasoning included (the app splits reasoning off after generation, so vLLM's
    reasoning-aware grammar, which starts after the reasoning, is not in play); None: unconstrained. A
    regex request samples from every token the grammar allows (``printable_only`` does not apply)."""
    extra_args: dict[str, int | float | str | list[int | float | str]] | None = None
    """Per-request arguments of the entry's custom logits processors, as its recipe gives them (vLLM's
    ``SamplingParams.extra_args``, ``vllm_xargs`` in an HTTP request): DeepSeek-OCR's n-gram processor reads
    ``ngram_size``, ``window_size`` and ``whitelist_token_ids``. None: none."""
    printable_only: bool | None = None
    """Sample only tokens that decode to printable text, plus end-of-sequence (the in-process engine's
    ``allowed_token_ids``; a remote server samples from every token); None: on for models with random
    weights, so their noise reads as text."""


@dataclass(frozen=True, config=_STRICT)
class EngineArgs:
    """vLLM engine arguments, under vLLM's own names (``AsyncEngineArgs`` fields)."""

    max_model_len: int | None = Field(None, ge=16)
    """Context window in tokens (prompt with image tokens, plus the answer)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weight and activation dtype."""
    limit_mm_per_prompt: dict[str, int] = Field(default_factory=lambda: {"image": 4})
    """Most items per modality in one prompt."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs one engine spreads its weights over."""
    trust_remote_code: bool = False
    """Allow the checkpoint's own Python code (InternVL needs it)."""
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    """Share of GPU memory vLLM may take."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Most requests batched at once."""
    max_num_batched_tokens: int | None = Field(None, ge=1)
    """Most tokens one engine step processes (prompt chunks and answers together)."""
    enable_chunked_prefill: bool | None = None
    """Split long prompts over several engine steps (vLLM's default: on)."""
    enforce_eager: bool | None = None
    """Skip CUDA graphs / torch.compile (faster start, slower steps)."""
    enable_mm_embeds: bool | None = None
    """Accept precomputed image embeddings (LLaVA-1.5, Qwen2.5-VL) instead of pixels."""
    load_format: str | None = None
    """How weights load; ``dummy`` gives random weights (tiny models)."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) of the checkpoint."""
    quantization: str | None = None
    """Quantization method, e.g. ``fp8``."""
    seed: int | None = None
    """Engine seed."""
    enable_prefix_caching: bool | None = None
    """Reuse earlier prompts' KV cache; None: on for the families the app knows (``engine.startup``). DeepSeek-OCR's
    recipe turns it off (``--no-enable-prefix-caching``)."""
    mm_processor_cache_gb: float | None = Field(None, ge=0)
    """Size of vLLM's processed-image cache; 0 turns it off (DeepSeek-OCR's recipe: ``--mm-processor-cache-gb 0``)."""
    logits_processors: tuple[str, ...] | None = None
    """Custom logits processors by fully-qualified class name (``module:Class``), loaded in the engine (DeepSeek-OCR's
    ``vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor``, which a request turns on with its
    ``ngram_size`` in ``SamplingParams.extra_args``)."""

    def to_vllm(self) -> dict[str, object]:
        """The arguments that were set, as keyword arguments for ``AsyncEngineArgs``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True, config=_STRICT)
class ModelSpec:
    """One model the app can serve."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    """Unique key (CLI ``--model``, UI picker value)."""
    label: str
    """Name shown to people."""
    family: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] = AUTO
    """Family adapter name (``vlm_demo/families/``); ``auto``: the adapter matching the checkpoint's
    config.json ``model_type``, else ``generic`` (everything from vLLM)."""
    repo: str | None = None
    """Hugging Face repo id of the checkpoint."""
    path: str | None = None
    """Local model directory (relative paths are relative to models.yaml)."""
    tiny: bool = False
    """Built offline by ``vlm_demo.tiny_models`` for its family; random weights."""
    endpoint: str | None = None
    """Base URL of a remote OpenAI-compatible vLLM server (``vllm serve``, Ray Serve LLM) to use
    instead of an in-process engine, e.g. ``http://gpu-box:8000``."""
    served_model_name: str | None = None
    """The model's name on that server (``--served-model-name``; the ``id`` in its ``/v1/models``)."""
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    """Name of the environment variable holding the server's API key (never the key itself)."""
    engine_args: EngineArgs = Field(default_factory=EngineArgs)
    """vLLM engine arguments."""
    controls: tuple[ControlSetting, ...] = ()
    """Per-request processor settings the page offers (sliders and checkboxes)."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Default sampling."""
    chat_template_content_format: Literal["auto", "string", "openai"] = "auto"
    """How the chat template takes a message's content (``vllm serve --chat-template-content-format``): ``auto``,
    vLLM's detection from the template; ``string`` where a recipe says so (dots.ocr's template joins strings, so vLLM
    puts the image placeholders into the text)."""
    reasoning_parser: str | None = None
    """vLLM reasoning parser that splits the model's thinking from its answer (a ``vllm serve
    --reasoning-parser`` name, e.g. ``qwen3``); None: the whole output is the answer."""
    needs_gpu: bool = False
    """Meant for a GPU: on a machine without one the picker lists it last, says "needs a GPU", and a pick of it
    keeps the running engine."""
    download_gb: float | None = Field(None, gt=0)
    """The checkpoint's download in GB (its weights, as the Hub lists them), for the picker's note before the first
    start ("needs a download of 7.5 GB ...") when the Hub cannot be asked."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.reasoning_parser is not None and self.endpoint is not None:
            raise ValueError("reasoning_parser belongs to the server's command line (--reasoning-parser), "
                             "not to an endpoint entry")
        if sum([self.repo is not None, self.path is not None, self.tiny, self.endpoint is not None]) != 1:
            raise ValueError("give exactly one of repo, path, tiny: true or endpoint")
        if self.tiny and self.family == AUTO:
            raise ValueError("a tiny entry needs a family with a tiny model builder")
        if self.download_gb is not None and self.repo is None:
            raise ValueError("download_gb belongs to a Hub entry (repo)")
        if self.endpoint is not None:
            _check_remote(self)
        elif self.served_model_name is not None or self.api_key_env is not None:
            raise ValueError("served_model_name and api_key_env belong to an endpoint entry")
        kwargs = [c.kwarg for c in self.controls]
        if len(set(kwargs)) != len(kwargs):
            raise ValueError("a control kwarg appears twice")
        return self

    @property
    def remote(self) -> bool:
        """True for an entry served by a remote vLLM server (``endpoint``)."""
        return self.endpoint is not None

    @property
    def random_weights(self) -> bool:
        """True for tiny models: their answers are noise."""
        return self.tiny or self.engine_args.load_format == "dummy"

    @property
    def display_label(self) -> str:
        """The label, marked "random weights" where that is so."""
        if self.random_weights and RANDOM_WEIGHTS not in self.label.lower():
            return f"{self.label} ({RANDOM_WEIGHTS})"
        return self.label

    def default_mm_kwargs(self) -> dict[str, int | bool]:
        """The per-request kwargs until the user moves a control: those the entry sets a default for."""
        return {c.kwarg: c.default for c in self.controls if c.default is not None}

    def mm_control(self, kwarg: str) -> ControlSetting | None:
        """The entry's control for ``kwarg``, if it has one."""
        return next((c for c in self.controls if c.kwarg == kwarg), None)


REMOTE_ENGINE_ARGS = frozenset({"limit_mm_per_prompt"})
"""The engine arguments an endpoint entry may state: they mirror the server's own settings."""


def _check_remote(spec: ModelSpec) -> None:
    """An endpoint entry: an http(s) base URL without credentials, a served name, and no engine
    arguments beyond what the app must know of the server (the server has its own command line)."""
    parts = urlsplit(spec.endpoint or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint must be an http(s) URL such as http://host:8000 (got {spec.endpoint!r})")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("endpoint must not hold credentials, a query or a fragment; name the API key's "
                         "environment variable with api_key_env")
    if not spec.served_model_name:
        raise ValueError("an endpoint entry needs served_model_name (the model's id in the server's /v1/models)")
    extra = {k for k, v in spec.engine_args.to_vllm().items() if v != getattr(EngineArgs(), k)} - REMOTE_ENGINE_ARGS
    if extra:
        raise ValueError(f"engine_args {sorted(extra)} belong to the server's command line, not to an "
                         f"endpoint entry (allowed: {sorted(REMOTE_ENGINE_ARGS)})")


def without_defaults(controls: tuple[ControlSetting, ...]) -> tuple[ControlSetting, ...]:
    """Controls borrowed from another entry of the family, without its defaults: a checkpoint it was not
    written for keeps its own processor settings until the user moves a control."""
    return tuple(replace(c, default=None) for c in controls)


def base_url(endpoint: str) -> str:
    """A server's base URL as OpenAI clients take it, with or without ``/v1``: the part before ``/v1``."""
    url = endpoint.rstrip("/")
    return url.removesuffix("/v1") if url.endswith("/v1") else url
