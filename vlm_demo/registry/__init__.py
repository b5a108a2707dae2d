"""The registry layer: ``models.yaml`` -> typed, checked model entries.

``spec``: the entry's types (``ModelSpec``, its engine arguments, sampling and controls); ``kwargs``: processor
kwargs as controls name them and as vLLM takes them; ``load``: the file -> ``Registry``. Nothing here imports vLLM
or a family adapter: what needs them is checked where they live (``profile.check``, ``engine.check_spec``).
"""

from .kwargs import SCOPES, flat_kwargs, image_scoped, processor_kwargs
from .load import Registry, load_registry, parse_registry, where
from .spec import (AUTO, RANDOM_WEIGHTS, REMOTE_ENGINE_ARGS, ControlSetting, EngineArgs, ModelSpec, Sampling, base_url,
                   without_defaults)

__all__ = ["AUTO", "RANDOM_WEIGHTS", "REMOTE_ENGINE_ARGS", "SCOPES", "ControlSetting", "EngineArgs", "ModelSpec",
           "Registry", "Sampling", "base_url", "flat_kwargs", "image_scoped", "load_registry", "parse_registry",
           "processor_kwargs", "where", "without_defaults"]
