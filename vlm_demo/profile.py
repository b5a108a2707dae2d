"""A model's profile: its registry entry with the family adapter that describes it, resolved once.

Every layer asks here what family a model is of; nothing else looks an adapter up by name. ``family: auto``
means the same everywhere: the adapter whose checkpoints have this checkpoint's config.json ``model_type``,
else the generic one (everything from vLLM). The checkpoint is read where this machine has it (a model
directory, a Hub checkpoint in the Hugging Face cache, the directory an engine starts from); until then an
``auto`` entry is generic, and the profile is resolved again once the checkpoint is here.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from . import families
from .families import AUTO, Adapter
from .families.grounding import Grounding
from .registry import ModelSpec


@dataclass(frozen=True)
class Profile:
    """What the app knows about one model: its entry and its family adapter."""

    spec: ModelSpec
    """The registry entry."""
    adapter: Adapter
    """The family adapter (``families.GENERIC`` where no adapter matches)."""
    model_type: str | None
    """The checkpoint's config.json ``model_type``, where it was read (None: not read here)."""

    @property
    def grounding(self) -> Grounding | None:
        """The family's answer format for "where is X" (Detect mode), or None."""
        return self.adapter.grounding

    def initial(self, kwarg: str) -> int | bool:
        """Where the page starts the control for ``kwarg``: the entry's default, else the real checkpoint's own
        value as the family adapter knows it (clamped to the control's range)."""
        setting = self.spec.mm_control(kwarg)
        if setting is None:
            raise KeyError(kwarg)
        offered = self.adapter.control(kwarg)
        if setting.default is not None or offered is None or offered.default is None:
            return setting.initial
        if setting.kind == "bool":
            return bool(offered.default)
        return min(max(int(offered.default), setting.min or 0), setting.max or 0)

    def startup_mm_kwargs(self) -> dict[str, int | bool]:
        """Kwargs the engine starts with: cache-sizing controls the entry sets at their largest value (a checkbox
        that sizes the cache: on), so every value works per request. A control without a default leaves the
        checkpoint's processor config in charge, its cache sizing too."""
        sizing = self.adapter.cache_sizing_kwargs
        return {c.kwarg: (True if c.kind == "bool" else c.max) for c in self.spec.controls
                if c.kwarg in sizing and c.default is not None}


_known: dict[str, Profile] = {}
_lock = threading.Lock()


def profile(spec: ModelSpec, model_dir: str | Path | None = None) -> Profile:
    """The profile of ``spec``, resolved once (``model_dir``: the directory an engine starts from, where
    the checkpoint has just arrived)."""
    with _lock:
        known = _known.get(spec.name)
    if known is not None and known.spec == spec and (model_dir is None or known.model_type is not None):
        return known
    model_type = read_model_type(spec, model_dir)
    if spec.family == AUTO:
        adapter = families.for_model_type(model_type or "")
    else:
        adapter = families.GENERIC if spec.family == families.GENERIC.name else families.ADAPTERS[spec.family]
    found = Profile(spec, adapter, model_type)
    if spec.family != AUTO or model_type is not None:  # an auto entry not read yet: ask again later
        with _lock:
            _known[spec.name] = found
    return found


def adapter(spec: ModelSpec) -> Adapter:
    """The family adapter of ``spec`` (its profile's)."""
    return profile(spec).adapter


def for_family(name: str) -> Adapter:
    """The adapter a resolved profile named (an inspection's ``family``)."""
    return families.GENERIC if name == families.GENERIC.name else families.ADAPTERS[name]


def read_model_type(spec: ModelSpec, model_dir: str | Path | None = None) -> str | None:
    """config.json's ``model_type`` of the entry's checkpoint, where this machine has it: ``model_dir`` (a
    directory, or what a server says it serves: a directory or a Hub id), the entry's directory, or a Hub
    checkpoint's config in the Hugging Face cache (nothing is fetched here)."""
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
        model_type = json.loads(Path(config).read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return model_type if isinstance(model_type, str) and model_type else None
