"""A model's profile: its registry entry with the family adapter that describes it, resolved once per model by the
service that serves it (``Profiles``) and handed down to every step of a request.

Every layer asks here what family a model is of; nothing else looks an adapter up by name. ``family: auto``
means the same everywhere: the adapter whose checkpoints have this checkpoint's config.json ``model_type``,
else the generic one (everything from vLLM). The checkpoint is read where this machine has it (a model
directory, a Hub checkpoint in the Hugging Face cache, the directory an engine starts from); until then an
``auto`` entry is generic, and the profile is resolved again once the checkpoint is here.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import families, registry, tiny_models
from .errors import RegistryError
from .families import Adapter
from .families.box_formats import Grounding
from .registry import (AUTO, SCOPES, ControlSetting, EngineArgs, ModelSpec, Registry, Sampling, flat_kwargs,
                       image_scoped, processor_kwargs, without_defaults)


@dataclass(frozen=True)
class Profile:
    """What the app knows about one model: its entry and its family adapter."""

    spec: ModelSpec
    """The registry entry."""
    adapter: Adapter
    """The family adapter (``families.GENERIC`` where no adapter matches)."""
    model_type: str | None
    """The checkpoint's config.json ``model_type``, where it was read (None: not read here)."""
    derived: tuple[ControlSetting, ...] | None = None
    """Controls derived from the model's processor (``engine.derive_controls``), for an entry that offers none; None
    until they are derived (that needs vLLM's renderer of the model)."""
    checkpoint_values: Mapping[str, int | bool] = field(default_factory=dict)
    """The checkpoint's own value of each derived control."""
    dicts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """The checkpoint's dict kwargs of derived controls (``size``), sent whole."""
    scoped: frozenset[str] = frozenset()
    """Derived controls sent as the image processor's alone (``images_kwargs``)."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Names the checkpoint's docs use for derived controls, which vLLM honours (``max_pixels`` for a Qwen-style
    processor's ``size.longest_edge``): a request may give either, and the control's own name is sent."""

    @property
    def controls(self) -> tuple[ControlSetting, ...]:
        """The per-request processor settings the model offers: the entry's, else its family adapter's (the
        names people know, the adapter's ranges and order), else those derived from its processor (none until
        derived)."""
        return self.spec.controls or self.family_controls or self.derived or ()

    @property
    def controls_source(self) -> str:
        """Where ``controls`` come from, in words."""
        if self.spec.controls:
            return "models.yaml"
        return f"the {self.adapter.title} adapter" if self.adapter.controls else "the model's processor"

    @property
    def family_controls(self) -> tuple[ControlSetting, ...]:
        """The family adapter's controls as the page shows them, without defaults: nothing is sent until moved,
        so the checkpoint's own processor config applies (the slider starts at the checkpoint's value)."""
        return tuple(ControlSetting(kwarg=c.kwarg, label=c.label or c.kwarg) if c.kind == "bool" else
                     ControlSetting(kwarg=c.kwarg, label=c.label or c.kwarg, min=c.min, max=c.max, step=c.step)
                     for c in self.adapter.controls)

    @property
    def controls_known(self) -> bool:
        """Whether ``controls`` is all the model offers (else its processor's are still to be derived)."""
        return (bool(self.spec.controls) or bool(self.adapter.controls) or bool(self.adapter.fixed_geometry)
                or self.derived is not None)

    def control(self, kwarg: str) -> ControlSetting | None:
        """The control for ``kwarg`` (or a name the checkpoint's docs use for it: ``aliases``), if the model offers
        it."""
        kwarg = self.aliases.get(kwarg, kwarg)
        return next((c for c in self.controls if c.kwarg == kwarg), None)

    def default_mm_kwargs(self) -> dict[str, int | bool]:
        """The per-request kwargs until the user moves a control: those the entry sets a default for."""
        return self.spec.default_mm_kwargs()

    def mm_processor_kwargs(self, chosen: Mapping[str, Any]) -> dict[str, Any]:
        """What a request sends as vLLM's ``mm_processor_kwargs``: the defaults with ``chosen`` over them, in the
        form the processor's current API takes (``registry.processor_kwargs``)."""
        return self.sent({**self.default_mm_kwargs(), **chosen})

    def sent(self, flat: Mapping[str, Any]) -> dict[str, Any]:
        """``flat`` (control names, dotted) as vLLM's ``mm_processor_kwargs``, without the defaults."""
        flat = {self.aliases.get(key, key): value for key, value in flat.items()}
        return processor_kwargs(image_scoped(flat, self.scoped), self.checkpoint_dicts, self.adapter.aliases)

    @property
    def checkpoint_dicts(self) -> dict[str, dict[str, Any]]:
        """The checkpoint's dict kwargs a control sends one key of (``size``; ``videos_kwargs.size`` where the
        video processor's differs): derived from the processor, or the adapter's controls' defaults under their
        aliases (Qwen's ``max_pixels`` default is ``size.longest_edge``), or a control that is itself a key of one
        (GLM-OCR's ``size.longest_edge``)."""
        found: dict[str, dict[str, Any]] = {}
        for control in self.adapter.controls:
            scope, dot, name = control.kwarg.rpartition(".")
            head, dot, key = self.adapter.aliases.get(name, "").partition(".")
            if dot and control.default is not None:
                found.setdefault(f"{scope}.{head}" if scope else head, {})[key] = control.default
            elif scope and scope.rpartition(".")[2] not in SCOPES and control.default is not None:
                found.setdefault(scope, {})[name] = control.default
        return {**found, **{k: dict(v) for k, v in self.dicts.items()}}

    def control_names(self, flat: Mapping[str, Any]) -> dict[str, Any]:
        """``flat`` (a request's kwargs, dotted) under the names the controls go by: an alias's target given
        (``size.longest_edge`` for Qwen) is its control (``max_pixels``)."""
        names = {target: name for name, target in self.adapter.aliases.items()}
        out = {}
        for key, value in flat.items():
            scope, dot, name = key.partition(".")
            if dot and scope in SCOPES:
                out[f"{scope}.{names.get(name, name)}"] = value
            else:
                out[names.get(key, key)] = value
        return out

    @property
    def grounding(self) -> Grounding | None:
        """The family's box format (Detect mode's "where is X" answers, or a document reader's cells), or None."""
        return self.adapter.grounding

    def initial(self, kwarg: str) -> int | bool:
        """Where the page starts the control for ``kwarg``: the entry's default; else, for a scoped control whose
        unscoped sibling the request sends anyway (``videos_kwargs.max_pixels`` beside a ``max_pixels`` with a
        default), the value that sibling sends into its scope (what the processor then gets); else the real
        checkpoint's own value as the family adapter knows it (clamped to the control's range)."""
        setting = self.control(kwarg)
        if setting is None:
            raise KeyError(kwarg)
        if setting.default is None and (inherited := self.inherited(kwarg)) is not None:
            return inherited if isinstance(inherited, bool) else min(max(int(inherited), setting.min or 0),
                                                                      setting.max or 0)
        if kwarg in self.checkpoint_values and setting.default is None:
            value = self.checkpoint_values[kwarg]
            return value if isinstance(value, bool) else min(max(int(value), setting.min or 0), setting.max or 0)
        offered = self.adapter.control(kwarg)
        if setting.default is not None or offered is None or offered.default is None:
            return setting.initial
        if setting.kind == "bool":
            return bool(offered.default)
        return min(max(int(offered.default), setting.min or 0), setting.max or 0)

    def inherited(self, kwarg: str) -> Any:
        """What a request sends for the scoped control ``kwarg`` while it is not moved, where another control's
        default puts a value into its scope (``max_pixels``: into ``videos_kwargs`` too); None where nothing does."""
        scope, dot, _ = kwarg.partition(".")
        if not (dot and scope in SCOPES) or not self.default_mm_kwargs():
            return None
        return self.control_names(flat_kwargs(self.mm_processor_kwargs({}))).get(kwarg)

    def with_derived(self, controls: tuple[ControlSetting, ...], values: Mapping[str, int | bool] | None = None,
                     dicts: Mapping[str, Mapping[str, int]] | None = None, scoped: frozenset[str] = frozenset(),
                     aliases: Mapping[str, str] | None = None) -> Profile:
        """This profile with the controls derived from its model's processor (the engine layer derives them):
        ``values`` the checkpoint's own, ``dicts`` its dict kwargs, ``scoped`` those sent as the image
        processor's alone, ``aliases`` the names its docs use."""
        return replace(self, derived=controls, checkpoint_values=dict(values or {}), dicts=dict(dicts or {}),
                       scoped=scoped, aliases=dict(aliases or {}))

    def startup_mm_kwargs(self) -> dict[str, Any]:
        """Kwargs the engine starts with: cache-sizing controls the entry sets at their largest value (a checkbox
        that sizes the cache: on), so every value works per request. A control without a default leaves the
        checkpoint's processor config in charge, its cache sizing too."""
        sizing = self.adapter.cache_sizing_kwargs
        return self.sent({c.kwarg: (True if c.kind == "bool" else c.max) for c in self.spec.controls
                           if c.kwarg in sizing and c.default is not None})


def resolve(spec: ModelSpec, model_dir: str | Path | None = None) -> Profile:
    """The profile of ``spec``, read from its checkpoint where this machine has it (``model_dir``: the directory an
    engine starts from, or the checkpoint a server says it serves). Nothing is kept: a service keeps its models'
    profiles (``Profiles``), an engine the one it started with."""
    config = read_config(spec, model_dir)
    model_type = _model_type(config)
    if spec.family == AUTO:
        adapter = families.for_model_type(model_type or "", _architectures(config))
    else:
        adapter = families.GENERIC if spec.family == families.GENERIC.name else families.ADAPTERS[spec.family]
    return Profile(spec, adapter, model_type)


def profile_of(model: ModelSpec | Profile) -> Profile:
    """``model``'s profile: itself, or a registry entry's resolved (where no service's is at hand: a test, a tool)."""
    return model if isinstance(model, Profile) else resolve(model)


class Profiles:
    """The profiles of one registry's models, each resolved once (again while a ``family: auto`` entry's checkpoint
    is not here: until then it is generic) and kept with the controls derived from its processor. The chat service
    owns one; what it resolves is handed down to every step of a request."""

    def __init__(self, registry: Registry):
        self.registry = registry
        """The models."""
        self._found: dict[str, Profile] = {}
        self._lock = threading.Lock()

    def get(self, model: str | ModelSpec, where: str | Path | None = None) -> Profile:
        """The profile of ``model`` (a name or an entry); ``where``: the checkpoint its engine or server uses, where
        the app knows it (an auto entry's family is read there)."""
        spec = self.registry.get(model) if isinstance(model, str) else model
        with self._lock:
            known = self._found.get(spec.name)
        if known is not None and known.spec == spec and (known.model_type is not None or spec.family != AUTO):
            return known
        found = resolve(spec, where)
        if known is not None and known.spec == spec and known.adapter is found.adapter:  # what was derived stays
            found = replace(found, derived=known.derived, checkpoint_values=known.checkpoint_values,
                            dicts=known.dicts, scoped=known.scoped, aliases=known.aliases)
        if spec.family != AUTO or found.model_type is not None:  # an auto entry not read yet: ask again later
            self.keep(found)
        return found

    @classmethod
    def of(cls, models: Registry | Profiles) -> Profiles:
        """``models`` as profiles: a store itself, or a registry's models resolved afresh (a test, a tool)."""
        return models if isinstance(models, Profiles) else cls(models)

    def keep(self, found: Profile) -> Profile:
        """Keep ``found`` (a profile with its controls derived) as its model's."""
        with self._lock:
            self._found[found.spec.name] = found
        return found


def grounding_families(detect: bool = False) -> list[str]:
    """The titles of the families whose answers the app reads boxes from (``detect``: those with Detect mode)."""
    return [a.title for a in families.ADAPTERS.values() if a.grounding and (a.grounding.detects or not detect)]


def for_family(name: str) -> Adapter:
    """The adapter a resolved profile named (an inspection's ``family``)."""
    return families.GENERIC if name == families.GENERIC.name else families.ADAPTERS[name]


def read_config(spec: ModelSpec, model_dir: str | Path | None = None) -> dict[str, Any] | None:
    """config.json of the entry's checkpoint, where this machine has it: ``model_dir`` (a directory, or what a server
    says it serves: a directory or a Hub id), the entry's directory, or a Hub checkpoint's config in the Hugging Face
    cache (nothing is fetched here)."""
    where = model_dir if model_dir is not None else spec.path if spec.path is not None else spec.repo
    if where is None:
        return None
    config: str | Path | None = Path(where) / "config.json"
    if not Path(where).is_dir():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(str(where), "config.json", revision=spec.engine_args.revision)
        except ValueError:  # not a Hub id either
            cached = None
        config = cached if isinstance(cached, str) else None
    if config is None:
        return None
    try:
        found = json.loads(Path(config).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _model_type(config: Mapping[str, Any] | None) -> str | None:
    model_type = (config or {}).get("model_type")
    return model_type if isinstance(model_type, str) and model_type else None


def _architectures(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    found = (config or {}).get("architectures")
    return tuple(a for a in found if isinstance(a, str)) if isinstance(found, list) else ()


def check(spec: ModelSpec) -> None:
    """Raise ``ValueError`` unless ``spec`` fits its family: a known family name, a tiny model builder for a tiny
    entry, and controls the family offers, of the same kind and within its range (the generic adapter knows
    none: its controls are the entry's own word)."""
    if spec.family not in (AUTO, families.GENERIC.name, *families.ADAPTERS):
        raise ValueError(f"unknown family {spec.family!r}; known: {AUTO}, {families.GENERIC.name}, "
                         f"{', '.join(families.ADAPTERS)}")
    if spec.tiny and spec.family not in tiny_models.FAMILIES:
        builders = ", ".join(sorted(tiny_models.FAMILIES))
        raise ValueError(f"a tiny entry needs a family with a tiny model builder: {builders}")
    found = families.get(spec.family) if spec.family != AUTO else families.GENERIC
    if found is families.GENERIC:
        return
    for setting in spec.controls:
        offered = found.control(setting.kwarg)
        if offered is None:
            names = sorted(c.kwarg for c in found.controls) or "none"
            raise ValueError(f"control kwarg {setting.kwarg!r} is not one of {found.name}'s: {names}")
        if offered.kind != setting.kind:
            raise ValueError(f"{setting.kwarg} is a {'checkbox (true/false)' if offered.kind == 'bool' else 'slider'}"
                             f" in {found.name}")
        low, high = offered.min, offered.max
        if setting.kind == "int" and ((low is not None and (setting.min or 0) < low)
                                      or (high is not None and (setting.max or 0) > high)):
            raise ValueError(f"{setting.kwarg}: {setting.min}..{setting.max} goes beyond what {found.name} "
                             f"takes ({low}..{high})")


def load_registry(path: Path, *checks: Callable[[ModelSpec], None]) -> Registry:
    """``models.yaml`` read and checked, each entry against its family too (``check``), and by ``checks`` (the
    engine layer's: ``engine.check_spec``)."""
    def each(spec: ModelSpec) -> None:
        for one in (check, *checks):
            one(spec)

    return registry.load_registry(path, each)


def spec_for_directory(models: Registry, directory: Path, *, trust_remote_code: bool = False,
                       max_model_len: int | None = None) -> ModelSpec:
    """A spec for a local model directory, as ``vllm serve DIR`` takes one: family ``auto`` (its config.json's
    ``model_type`` picks the adapter); engine arguments and controls from the registry's model of that family (a
    tiny one when the directory has no weight files: those load with random weights, vLLM's dummy format)."""
    try:
        config = json.loads((directory / "config.json").read_text())
        model_type = config.get("model_type", "")
    except (OSError, ValueError, AttributeError) as exc:
        raise RegistryError(f"{directory}: not a model directory (config.json: {exc})") from None
    found = families.for_model_type(model_type, _architectures(config))
    has_weights = any(directory.glob("*.safetensors")) or any(directory.glob("*.bin"))
    same_family = [m for m in models.models if m.family == found.name] if found is not families.GENERIC else []
    template = next((m for m in same_family if m.tiny != has_weights), same_family[0] if same_family else None)
    base = template.engine_args if template else EngineArgs()
    engine_args = replace(base, trust_remote_code=trust_remote_code, max_model_len=max_model_len or base.max_model_len,
                          load_format=None if has_weights else "dummy")
    name = re.sub(r"[^A-Za-z0-9._-]", "-", directory.resolve().name) or "local"
    return ModelSpec(name=name, label=f"{directory}", family=AUTO, path=str(directory.resolve()),
                     engine_args=engine_args, controls=without_defaults(template.controls) if template else (),
                     sampling=template.sampling if template else Sampling(),
                     chat_template_content_format=template.chat_template_content_format if template else "auto")


def spec_for_endpoint(models: Registry, endpoint: str, served_model_name: str, family: str | None = None,
                      api_key_env: str | None = None) -> ModelSpec:
    """A spec for a model on a remote vLLM server (``--endpoint URL --model SERVED_NAME``).

    Family, controls and sampling come from the registry's entry whose name, repo or served name is
    ``served_model_name``, else from its first entry of ``family``; with neither, the family is ``auto`` (resolved
    from what the server says about the model when it is reached)."""
    endpoint = registry.base_url(endpoint)
    known = next((m for m in models.models if served_model_name in (m.name, m.repo, m.served_model_name)), None)
    family = family or (known.family if known else AUTO)
    template = known if known and known.family == family else next(
        (m for m in models.models if m.family == family and family != AUTO), None)
    name = re.sub(r"[^A-Za-z0-9._-]", "-", served_model_name).lstrip("._-") or "remote"
    try:
        spec = ModelSpec(
            name=name, label=f"{served_model_name} at {endpoint}", family=family, endpoint=endpoint,
            served_model_name=served_model_name, api_key_env=api_key_env,
            engine_args=EngineArgs(limit_mm_per_prompt=dict(template.engine_args.limit_mm_per_prompt))
            if template else EngineArgs(),
            controls=(template.controls if template is known else without_defaults(template.controls))
            if template else (),
            sampling=template.sampling if template else Sampling(),
            chat_template_content_format=template.chat_template_content_format if template else "auto")
        check(spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RegistryError(f"--endpoint {endpoint}: {registry.where(err['loc'])}: "
                            f"{err['msg'].removeprefix('Value error, ')}") from None
    except ValueError as exc:
        raise RegistryError(f"--endpoint {endpoint}: {exc}") from None
    return spec
