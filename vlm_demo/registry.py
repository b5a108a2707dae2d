"""The model registry: ``models.yaml`` -> typed, validated ``ModelSpec`` values.

Every entry is checked at start-up; an unknown key or a bad value raises ``RegistryError`` naming
the file, the model and the key.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit
from dataclasses import dataclass as std_dataclass
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from .errors import RegistryError, UnknownModelError
from .families import FAMILIES, family_of_model_type

_STRICT = ConfigDict(extra="forbid")
RANDOM_WEIGHTS = "random weights"


@dataclass(frozen=True, config=_STRICT)
class Slider:
    """One per-request image-processor setting shown as a slider."""

    kwarg: str
    """vLLM ``mm_processor_kwargs`` name the slider sets (e.g. ``max_pixels``)."""
    label: str
    """Text shown beside the slider."""
    min: int
    """Smallest value."""
    max: int
    """Largest value; the engine starts with it when the kwarg sizes its encoder cache."""
    default: int
    """Value used until the user moves the slider."""
    step: int = 1
    """Slider step."""

    @model_validator(mode="after")
    def _check_range(self) -> Slider:
        if not self.min <= self.default <= self.max:
            raise ValueError(f"need min <= default <= max (got {self.min}, {self.default}, {self.max})")
        if self.step <= 0:
            raise ValueError("step must be positive")
        return self


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
    family: str
    """Key into ``families.FAMILIES``."""
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
    sliders: tuple[Slider, ...] = ()
    """Per-request image-processor settings."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Default sampling."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}; known: {', '.join(FAMILIES)}")
        if sum([self.repo is not None, self.path is not None, self.tiny, self.endpoint is not None]) != 1:
            raise ValueError("give exactly one of repo, path, tiny: true or endpoint")
        if self.endpoint is not None:
            _check_remote(self)
        elif self.served_model_name is not None or self.api_key_env is not None:
            raise ValueError("served_model_name and api_key_env belong to an endpoint entry")
        allowed = FAMILIES[self.family].slider_kwargs
        kwargs = [s.kwarg for s in self.sliders]
        for kwarg in kwargs:
            if kwarg not in allowed:
                raise ValueError(f"slider kwarg {kwarg!r} is not one of {self.family}'s: {sorted(allowed) or 'none'}")
        if len(set(kwargs)) != len(kwargs):
            raise ValueError("a slider kwarg appears twice")
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

    def default_mm_kwargs(self) -> dict[str, int]:
        """Each slider at its default: the per-request kwargs until the user moves a slider."""
        return {s.kwarg: s.default for s in self.sliders}

    def startup_mm_kwargs(self) -> dict[str, int]:
        """Kwargs the engine starts with: cache-sizing sliders at their largest value."""
        sizing = FAMILIES[self.family].cache_sizing_kwargs
        return {s.kwarg: s.max for s in self.sliders if s.kwarg in sizing}


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

    def spec_for_directory(self, directory: Path, *, trust_remote_code: bool = False,
                           max_model_len: int | None = None) -> ModelSpec:
        """A spec for a local model directory, as ``vllm serve DIR`` takes one.

        The family comes from config.json; engine arguments and sliders from this registry's model
        of that family (a tiny one when the directory has no weight files: those load with random
        weights, vLLM's dummy format).
        """
        config_file = directory / "config.json"
        try:
            model_type = json.loads(config_file.read_text()).get("model_type", "")
        except (OSError, ValueError) as exc:
            raise RegistryError(f"{directory}: not a model directory (config.json: {exc})") from None
        family = family_of_model_type(model_type)
        if family is None:
            raise RegistryError(f"{directory}: model_type {model_type!r} is not a supported family")
        has_weights = any(directory.glob("*.safetensors")) or any(directory.glob("*.bin"))
        same_family = [m for m in self.models if m.family == family.name]
        template = next((m for m in same_family if m.tiny != has_weights), same_family[0] if same_family else None)
        base = template.engine_args if template else EngineArgs()
        engine_args = replace(base, trust_remote_code=trust_remote_code,
                              max_model_len=max_model_len or base.max_model_len,
                              load_format=None if has_weights else "dummy")
        name = re.sub(r"[^A-Za-z0-9._-]", "-", directory.resolve().name) or "local"
        return ModelSpec(name=name, label=f"{directory}", family=family.name, path=str(directory.resolve()),
                         engine_args=engine_args, sliders=template.sliders if template else (),
                         sampling=template.sampling if template else Sampling())

    def spec_for_endpoint(self, endpoint: str, served_model_name: str, family: str | None = None,
                          api_key_env: str | None = None) -> ModelSpec:
        """A spec for a model on a remote vLLM server (``--endpoint URL --model SERVED_NAME``).

        Family, sliders and sampling come from this registry's entry whose name, repo or served name
        is ``served_model_name``, else from its first entry of ``family`` (which must then be given).
        """
        known = next((m for m in self.models if served_model_name in (m.name, m.repo, m.served_model_name)), None)
        if family is None and known is None:
            raise RegistryError(f"{served_model_name!r} is not in {self.path.name}: give its family "
                                f"(--family {' | '.join(FAMILIES)})")
        family = family or (known.family if known else "")
        if family not in FAMILIES:
            raise RegistryError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
        template = known if known and known.family == family else next(
            (m for m in self.models if m.family == family), None)
        name = re.sub(r"[^A-Za-z0-9._-]", "-", served_model_name).lstrip("._-") or "remote"
        try:
            return ModelSpec(
                name=name, label=f"{served_model_name} at {endpoint}", family=family, endpoint=endpoint,
                served_model_name=served_model_name, api_key_env=api_key_env,
                engine_args=EngineArgs(limit_mm_per_prompt=dict(template.engine_args.limit_mm_per_prompt))
                if template else EngineArgs(),
                sliders=template.sliders if template else (), sampling=template.sampling if template else Sampling())
        except ValidationError as exc:
            err = exc.errors()[0]
            raise RegistryError(f"--endpoint {endpoint}: {_where(err['loc'])}: "
                                f"{err['msg'].removeprefix('Value error, ')}") from None


def _where(loc: tuple[object, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(entry)"


def parse_registry(text: str, path: Path) -> Registry:
    """Parse and validate the YAML text of a registry file."""
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
            key = _where(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "unexpected_keyword_argument":
                msg = "unknown key"
                if key in ("api_key", "key", "token", "password"):
                    msg = ("unknown key: never put a secret in this file; set api_key_env to the name of the "
                           "environment variable that holds the API key")
            raise RegistryError(f"{path}: model '{name}': key '{key}': {msg}") from None
        except TypeError as exc:  # e.g. a non-string key
            raise RegistryError(f"{path}: model '{name}': {exc}") from None
        if spec.name in {m.name for m in models}:
            raise RegistryError(f"{path}: model '{name}': key 'name': duplicate name")
        if spec.path is not None and not Path(spec.path).is_absolute():
            spec = ModelSpec(**{**entry, "path": str((path.parent / spec.path).resolve())})
        models.append(spec)
    if not models:
        raise RegistryError(f"{path}: no models")
    return Registry(path, tuple(models))


def load_registry(path: Path) -> Registry:
    """Read and validate ``path``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_registry(text, path)
