"""The per-process caches of intake: a bounded, thread-safe map of the most recently used values."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class Recent:
    """A bounded map that keeps the most recently used values (thread-safe); the oldest go first."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], object]) -> object:
        """The value kept for ``key``, made (outside the lock) and kept when there is none."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value
