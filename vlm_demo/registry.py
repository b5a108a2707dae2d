"""The model registry: ``models.yaml`` -> typed, validated ``ModelSpec`` values.

Every entry is checked at start-up; an unknown key or a bad value raises ``RegistryError`` naming
the file, the model and the key.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit
from dataclasses import dataclass as std_dataclass
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator, model_validator
from pydantic.dataclasses import dataclass

from .errors import RegistryError, UnknownModelError

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

    def to_vllm(self) -> dict[str, object]:
        """The arguments that were set, as keyword arguments for ``AsyncEngineArgs``."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


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
    reasoning_parser: str | None = None
    """vLLM reasoning parser that splits the model's thinking from its answer (a ``vllm serve
    --reasoning-parser`` name, e.g. ``qwen3``); None: the whole output is the answer."""

    @field_validator("reasoning_parser")
    @classmethod
    def _known_parser(cls, name: str | None) -> str | None:
        if name is not None:
            check_reasoning_parser(name)
        return name

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.reasoning_parser is not None and self.endpoint is not None:
            raise ValueError("reasoning_parser belongs to the server's command line (--reasoning-parser), "
                             "not to an endpoint entry")
        if sum([self.repo is not None, self.path is not None, self.tiny, self.endpoint is not None]) != 1:
            raise ValueError("give exactly one of repo, path, tiny: true or endpoint")
        if self.tiny and self.family == AUTO:
            raise ValueError("a tiny entry needs a family with a tiny model builder")
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


SCOPES = ("images_kwargs", "videos_kwargs")
"""Per-modality scopes of processor kwargs: ``videos_kwargs.max_pixels`` is ``max_pixels`` for videos alone
(vLLM hands ``{"videos_kwargs": {...}}`` to the HF processor's video part, and keys its cache by it); a kwarg
without a scope applies to every modality the processor takes (Qwen's ``max_pixels``: images and frames)."""


def processor_kwargs(flat: Mapping[str, Any], dicts: Mapping[str, Mapping[str, Any]] | None = None,
                     aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Control values as vLLM's ``mm_processor_kwargs``: scoped names nested (``{"videos_kwargs.max_pixels":
    1}`` -> ``{"videos_kwargs": {"max_pixels": 1}}``), the rest as they are, except a name that is also scoped:
    its unscoped value goes into every scope that does not set it (``{"max_pixels": 2, "videos_kwargs.max_pixels":
    1}`` -> ``{"images_kwargs": {"max_pixels": 2}, "videos_kwargs": {"max_pixels": 1}}``). Given both ways,
    transformers 5.19 applies neither to images (they got the checkpoint's ``max_pixels``), while vLLM 0.32 keys
    its caches as if the unscoped one applied: a later turn then found an image's cached encoding of another size
    than its prompt ("Encoder cache entry ... holds 798 embeddings, but request ... expects 1196") and failed.

    ``aliases`` renames a control to the kwarg the processor's current API takes (Qwen's ``max_pixels`` is
    ``size.longest_edge``: transformers 5.19 deprecates the pixel kwargs). A key of a dict kwarg
    (``size.longest_edge``) sends the whole dict: the keys it does not set at their values in ``dicts`` (the
    checkpoint's: ``size`` for images, ``videos_kwargs.size`` where the video processor's differs), as
    processors take ``size`` whole; an unscoped dict whose checkpoint value differs per scope goes into each
    scope, filled from that scope's own."""
    dicts, aliases = dicts or {}, aliases or {}
    plain: dict[str, dict[str, Any]] = {}  # scope ("" = none) -> name -> value
    keyed: dict[str, dict[str, dict[str, Any]]] = {}  # scope -> dict kwarg -> key -> value
    for key, value in flat.items():
        scope, dot, name = key.partition(".")
        if not (dot and scope in SCOPES):
            scope, name = "", key
        name = aliases.get(name, name)
        head, dot, sub = name.partition(".")
        if dot:
            keyed.setdefault(scope, {}).setdefault(head, {})[sub] = value
        else:
            plain.setdefault(scope, {})[name] = value
    scoped = {name for scope in SCOPES for name in plain.get(scope, {})}
    split = {head for scope in SCOPES for head in keyed.get(scope, {})} | {
        head for head in keyed.get("", {}) if any(f"{scope}.{head}" in dicts for scope in SCOPES)}
    out: dict[str, Any] = {}
    for name, value in plain.get("", {}).items():
        if name in scoped:
            for scope in SCOPES:
                plain.setdefault(scope, {}).setdefault(name, value)
        else:
            out[name] = value
    for head, keys in keyed.get("", {}).items():
        if head in split:
            for scope in SCOPES:
                keyed.setdefault(scope, {})[head] = {**keys, **keyed.get(scope, {}).get(head, {})}
        else:
            out[head] = {**dicts.get(head, {}), **keys}
    for scope in SCOPES:
        part = dict(plain.get(scope, {}))
        for head, keys in keyed.get(scope, {}).items():
            part[head] = {**dicts.get(f"{scope}.{head}", dicts.get(head, {})), **keys}
        if part:
            out[scope] = part
    return out


def image_scoped(flat: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """``flat`` with the kwargs ``names`` as the image processor's alone (``size.longest_edge`` ->
    ``images_kwargs.size.longest_edge``): how controls derived from a model's image processor are sent where the
    model takes them so. Scoped, a value wins over a server's start-up kwargs of either form (vLLM 0.32 lets a
    scoped value win over a flat one, whichever side gives it), and a model's video processor keeps its own."""
    return {f"images_kwargs.{key}" if key in names else key: value for key, value in flat.items()}


def flat_kwargs(nested: Mapping[str, Any]) -> dict[str, Any]:
    """``processor_kwargs`` undone, aliases aside: each value under its dotted name (``--mm-kwargs`` may give
    either form; ``{"size": {"longest_edge": 1}}`` is ``size.longest_edge``)."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{name}": v for name, v in flat_kwargs(value).items()})
        else:
            out[key] = value
    return out


def check_reasoning_parser(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is one of vLLM's reasoning parsers (``ReasoningParserManager``)."""
    from vllm.reasoning import ReasoningParserManager

    known = ReasoningParserManager.list_registered()
    if name not in known:
        raise ValueError(f"unknown reasoning parser {name!r}; vLLM's: {', '.join(known)}")


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


@std_dataclass(frozen=True)
class Registry:
    """All models of one ``models.yaml``, in file order."""

    path: Path
    """The file they came from."""
    models: tuple[ModelSpec, ...]
    """The entries."""

    def get(self, name: str) -> ModelSpec:
        """The model called ``name``, or ``UnknownModelError``."""
        for spec in self.models:
            if spec.name == name:
                return spec
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        """Model names in file order."""
        return [m.name for m in self.models]

    def default(self, has_gpu: bool) -> ModelSpec:
        """First real model with a GPU; first tiny model without one."""
        for spec in self.models:
            if spec.tiny != has_gpu:
                return spec
        return self.models[0]

    def with_model(self, spec: ModelSpec) -> Registry:
        """A copy with ``spec`` added (a local model directory given on the command line)."""
        return Registry(self.path, (*[m for m in self.models if m.name != spec.name], spec))


def without_defaults(controls: tuple[ControlSetting, ...]) -> tuple[ControlSetting, ...]:
    """Controls borrowed from another entry of the family, without its defaults: a checkpoint it was not
    written for keeps its own processor settings until the user moves a control."""
    return tuple(replace(c, default=None) for c in controls)


def base_url(endpoint: str) -> str:
    """A server's base URL as OpenAI clients take it, with or without ``/v1``: the part before ``/v1``."""
    url = endpoint.rstrip("/")
    return url.removesuffix("/v1") if url.endswith("/v1") else url


def where(loc: tuple[object, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(entry)"


def parse_registry(text: str, path: Path, check: Callable[[ModelSpec], None] | None = None) -> Registry:
    """Parse and validate the YAML text of a registry file; ``check`` (``ValueError``: bad) checks each entry
    beyond its own fields (``profile.check``: against its family adapter)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], list):
        raise RegistryError(f"{path}: expected one top-level key 'models' holding a list")
    models: list[ModelSpec] = []
    for index, entry in enumerate(data["models"]):
        name = entry.get("name", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
        if not isinstance(entry, dict):
            raise RegistryError(f"{path}: model {name}: expected a mapping")
        try:
            spec = ModelSpec(**entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = where(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "unexpected_keyword_argument":
                msg = "unknown key"
                if key in ("api_key", "key", "token", "password"):
                    msg = ("unknown key: never put a secret in this file; set api_key_env to the name of the "
                           "environment variable that holds the API key")
            raise RegistryError(f"{path}: model '{name}': key '{key}': {msg}") from None
        except TypeError as exc:  # e.g. a non-string key
            raise RegistryError(f"{path}: model '{name}': {exc}") from None
        if check is not None:
            try:
                check(spec)
            except ValueError as exc:
                raise RegistryError(f"{path}: model '{name}': {exc}") from None
        if spec.name in {m.name for m in models}:
            raise RegistryError(f"{path}: model '{name}': key 'name': duplicate name")
        if spec.path is not None and not Path(spec.path).is_absolute():
            spec = ModelSpec(**{**entry, "path": str((path.parent / spec.path).resolve())})
        models.append(spec)
    if not models:
        raise RegistryError(f"{path}: no models")
    return Registry(path, tuple(models))


def load_registry(path: Path, check: Callable[[ModelSpec], None] | None = None) -> Registry:
    """Read and validate ``path`` (``check``: as ``parse_registry`` takes it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_registry(text, path, check)
