"""Gradio's server as the page runs it: work Gradio 6.31 does on every event that the page does not use, left out,
and work it repeats on every streamed update done once (``files_moved_once``).

The queue is woken by the events pushed to it instead of looking for them every millisecond: Gradio 6.31's
``Queue.start_processing`` sleeps ``sleep_when_free`` (1 ms) and looks again while no event waits, and
``start_progress_updates`` every 10 ms: an idle app spent 41-43 ms of CPU per second on it, which at a real model's
token or so per second was nearly all of the app's CPU per token, and each event waited for the next look. Here the
idle loop waits for a push; while events wait for a free slot it looks every ``sleep_when_free`` as Gradio does.
The page reports no server-side progress (no ``gr.Progress``), so the progress loop looks seldom. Idle app process:
17-21 ms of CPU a second with Gradio's loop at 5 ms, 2-3 ms with this one (10-s samples, no engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import time
from collections import OrderedDict

import gradio.utils
from gradio import processing_utils
from gradio.data_classes import GradioModel, GradioRootModel
from gradio.queueing import Queue
from gradio.utils import run_coro_in_background, set_task_name
from gradio_client import utils as client_utils

IDLE_CHECK_S = 1.0
"""Longest idle wait between two looks (a safety net: every push wakes the loop at once)."""
PROGRESS_POLL_S = 0.5
"""How often the progress loop looks (Gradio's: 10 ms)."""


class WakingQueue(Queue):
    """``Queue`` whose processing loop sleeps until an event is pushed (see the module's docstring)."""

    _pushed: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    """The loop the processing runs in (``close`` wakes it from another thread)."""

    def _event(self) -> asyncio.Event:
        if self._pushed is None:
            self._pushed = asyncio.Event()
        return self._pushed

    async def push(self, *args, **kwargs):
        out = await super().push(*args, **kwargs)
        self._event().set()
        return out

    def close(self) -> None:
        """Gradio's, and the idle loop woken to see it (``close`` comes from another thread)."""
        super().close()
        pushed, loop = self._pushed, self._loop
        if pushed is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(pushed.set)

    async def start_processing(self) -> None:
        """Gradio 6.31's loop (``gradio/queueing.py``), its idle look an awaited push."""
        pushed = self._event()
        self._loop = asyncio.get_running_loop()
        try:
            while not self.stopped:
                if len(self) == 0:
                    pushed.clear()
                    if len(self) == 0:
                        try:
                            await asyncio.wait_for(pushed.wait(), IDLE_CHECK_S)
                        except TimeoutError:
                            pass
                    continue
                if None not in self.active_jobs:
                    await asyncio.sleep(self.sleep_when_free)
                    continue
                async with self.delete_lock:
                    event_batch = self.get_events()
                if not event_batch:
                    await asyncio.sleep(self.sleep_when_free)
                    continue
                events, batch, concurrency_id = event_batch
                self.active_jobs[self.active_jobs.index(None)] = events
                event_queue = self.event_queue_per_concurrency_id[concurrency_id]
                event_queue.current_concurrency += 1
                start_time = time.time()
                fn = events[0].fn
                event_queue.start_times_per_fn[fn].add(start_time)
                for event in events:
                    if (a := self.event_analytics.get(event._id)) is not None:
                        a["status"] = "processing"
                task = run_coro_in_background(self.process_events, events, batch, start_time, fn)
                set_task_name(task, events[0].session_hash, fn._id, events[0]._id, batch)
                self._asyncio_tasks.add(task)
                task.add_done_callback(self._asyncio_tasks.discard)
                if self.live_updates:
                    self.broadcast_estimations(concurrency_id)
        finally:
            self.stopped = True
            self._cancel_asyncio_tasks()


ANALYTICS_KEPT = 1000
"""Events whose timings Gradio's queue keeps for its monitoring page (Gradio's default: 10,000)."""


def tuned(queue: Queue, poll_s: float) -> Queue:
    """``queue`` (``Blocks.queue``'s, before the app starts) as a ``WakingQueue``; ``poll_s``: how often it looks
    while events wait for a free slot. Its monitoring summary is never recomputed: Gradio rebuilds it after every
    event from every event kept (a pandas DataFrame and a group-by: 3-5 ms an event at first, 12 ms with the 10,000
    events a long-running app keeps), and the page does not show it."""
    queue.__class__ = WakingQueue
    queue.sleep_when_free = poll_s
    queue.progress_update_sleep_when_free = PROGRESS_POLL_S
    queue.ANALYTICS_MAX_EVENTS = ANALYTICS_KEPT
    queue.ANAYLTICS_CACHE_FREQUENCY = 2**62  # (sic: Gradio's name) never
    return queue


class _NoBackendSwitch(contextlib.AbstractContextManager):
    """Gradio's ``MatplotlibBackendMananger`` where matplotlib is not installed: it does nothing there, after
    looking for matplotlib twice along ``sys.path`` (0.1 ms, at every event and every streamed update)."""

    def __exit__(self, *exc) -> None:
        return None


def without_matplotlib_lookups() -> None:
    """Where matplotlib is not installed, Gradio's events stop looking for it (``_NoBackendSwitch``)."""
    if importlib.util.find_spec("matplotlib") is None:
        gradio.utils.MatplotlibBackendMananger = _NoBackendSwitch  # type: ignore[misc]


FILES_MOVED_KEPT = 4096
"""Files whose move into a component's cache is remembered (``files_moved_once``): the most recently used."""
FILE_FIELDS = ("path", "url", "size", "orig_name", "mime_type", "is_stream", "meta")
"""Gradio 6.31's file data (``FileData``): what a file's move depends on."""


class FilesMovedOnce:
    """Gradio's ``processing_utils.async_move_files_to_cache`` for an event's outputs, each file's move remembered.

    Gradio 6.31 post-processes every output of every streamed update whole, in two passes (the session's config and
    the message), and each file in it is checked again each time: is it a static file, is it allowed, its copy into
    the component's cache (path resolving, ``stat`` and hashing): the chat's pictures, every update of every answer.
    At the fifth question (five pictures in the chat) an update cost 5.8 ms against 2.8 at the first
    (``bench/update_cost.py``). A file's move gives the same result for the same file data and component (the page's
    files are named by their content and not changed: uploads, drawn pictures), so it is done once and its result
    reused while the moved file is there; inputs, proxied components and files kept in the cache go as Gradio has
    them."""

    def __init__(self, move):
        self.move = move
        self.done: OrderedDict[tuple, dict] = OrderedDict()

    async def __call__(self, data, block, postprocess=False, check_in_upload_folder=False, keep_in_cache=False):
        if not postprocess or check_in_upload_folder or keep_in_cache or getattr(block, "proxy_url", None):
            return await self.move(data, block, postprocess, check_in_upload_folder, keep_in_cache)
        if isinstance(data, GradioModel | GradioRootModel):
            data = data.model_dump()

        async def one(file: dict) -> dict:
            if file.get("is_stream"):
                return await self.move(file, block, postprocess=True)
            key = (block._id, *(repr(file.get(k)) for k in FILE_FIELDS))
            moved = self.done.get(key)
            if moved is None or not os.path.exists(moved["path"]):
                moved = await self.move(file, block, postprocess=True)
                self.done[key] = moved
                while len(self.done) > FILES_MOVED_KEPT:
                    self.done.popitem(last=False)
            self.done.move_to_end(key)
            return dict(moved)  # (Gradio sets the root URL in the file data it sends, in place)

        return await client_utils.async_traverse(data, one, client_utils.is_file_obj_with_meta)


def files_moved_once() -> None:
    """An event's output files are moved into their component's cache once (``FilesMovedOnce``); idempotent."""
    if not isinstance(processing_utils.async_move_files_to_cache, FilesMovedOnce):
        processing_utils.async_move_files_to_cache = FilesMovedOnce(processing_utils.async_move_files_to_cache)
