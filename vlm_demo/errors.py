"""The one family of user-facing errors. The UI turns them into ``gr.Error``; the CLI prints them."""


class VlmDemoError(Exception):
    """Something the user can act on; its message is shown to them as is."""


class RegistryError(VlmDemoError):
    """``models.yaml`` is invalid (the message names the file, the model and the key)."""


class UnknownModelError(VlmDemoError):
    """A model name that is not in the registry."""


class EngineStartError(VlmDemoError):
    """The engine for a model could not be started (bad path, not enough memory, ...)."""


class EngineBusyError(VlmDemoError):
    """A model switch was refused: the running engine still serves other users."""


class EngineDiedError(VlmDemoError):
    """The engine stopped during a request; the next request starts a fresh one."""


class InputError(VlmDemoError):
    """A bad request: an unreadable image, too many images, an empty question, ..."""


class RemoteError(VlmDemoError):
    """A remote vLLM server could not be reached, timed out or refused a request (its text included)."""
