"""A streaming handler's values, sent in batches within the call's window."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
import threading

from .errors import AbortError, trim_traceback
from .stdio import exit_as_system_exit

#: Values of a stream in flight (sent, not yet credited) when a call sets no window.
DEFAULT_STREAM_WINDOW_ITEMS = 1024
#: Payload bytes of a stream in flight when a call sets no window: 4 MiB.
DEFAULT_STREAM_WINDOW_BYTES = 4 * 1024 * 1024
#: Most values in one ``items`` message.
STREAM_BATCH_VALUES = 256
#: How long a stream's first gathered value may wait for others, in seconds.
STREAM_BATCH_DELAY_SECONDS = 0.002


class Batch:
    """Values of a stream gathered into one ``items`` message.

    The pump thread adds values; the batch goes out when it is full (256
    values, or what the window has room for), when the window needs its
    credit, or 2 ms after its first value (a timer thread), so a slow
    generator's value is not held back. The first message carries one value,
    so that the size of values is known before a batch can overshoot the
    window's bytes.
    """

    __slots__ = ("server", "call", "lock", "values", "timer", "error", "bytes_per_value")

    def __init__(self, server, call):
        self.server = server
        self.call = call
        self.lock = threading.Lock()
        self.values = []
        self.timer = None
        self.error = None
        self.bytes_per_value = 0

    def room(self):
        """How many more values this batch may take."""
        call = self.call
        pending = len(self.values)
        items = call.window_items - call.in_flight_items - pending
        space = call.window_bytes - call.in_flight_bytes
        if items <= 0 or space <= 0:
            return 0
        by_bytes = max(1, space // self.bytes_per_value) - pending if self.bytes_per_value else 1 - pending
        return min(items, by_bytes, STREAM_BATCH_VALUES - pending)

    def add(self, value):
        with self.lock:
            self.values.append(value)
            if self.timer is None:
                timer = threading.Timer(STREAM_BATCH_DELAY_SECONDS, self.flush)
                timer.daemon = True
                self.timer = timer
                timer.start()

    def discard(self):
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.values = []

    def flush(self):
        """Sends the values gathered; a value that cannot cross sets ``error``."""
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            values = self.values
            if not values or self.error is not None:
                return
            self.values = []
            server = self.server
            call = self.call
            try:
                size = server.send({"type": "items", "id": call.id, "values": values})
            except Exception as error:  # noqa: BLE001 - reported as the stream's failure
                self.error = (
                    error
                    if isinstance(error, TypeError)
                    else TypeError(f"Cannot send value: {type(error).__name__}: {error}")
                )
                with server.lock:
                    server.lock.notify_all()
                return
            self.bytes_per_value = max(1, size // len(values))
            with server.lock:
                call.in_flight_items += len(values)
                call.in_flight_bytes += size


def pump(server, call, iterator):
    """Sends a streaming handler's values within the call's window, then ``end``."""
    context = call.context
    is_async = not inspect.isgenerator(iterator)
    done = False
    batch = Batch(server, call)
    try:
        while True:
            if batch.room() <= 0:
                batch.flush()
                with server.lock:
                    while (
                        not context.cancelled.is_set()
                        and batch.error is None
                        and (call.in_flight_items >= call.window_items or call.in_flight_bytes >= call.window_bytes)
                    ):
                        server.lock.wait()
            if context.cancelled.is_set():
                raise AbortError()
            if batch.error is not None:
                raise batch.error
            try:
                if is_async:
                    value = server.await_on_loop(iterator.__anext__(), context)
                else:
                    value = next(iterator)
            except (StopIteration, StopAsyncIteration):
                done = True
                break
            if context.cancelled.is_set():
                raise AbortError()
            batch.add(value)
        batch.flush()
        if batch.error is not None:
            done = False
            raise batch.error
    except SystemExit as stop:
        exit_as_system_exit(stop)
    except (asyncio.CancelledError, concurrent.futures.CancelledError):
        batch.discard()
        close_iterator(server, iterator, is_async, done)
        context._flush_progress(ending=True)
        server.fail(call.id, AbortError())
        return
    except BaseException as error:  # noqa: BLE001 - every failure is an answer
        trim_traceback(error)
        if isinstance(error, AbortError) and context.cancelled.is_set():
            batch.discard()
        else:
            # The values yielded before the failure go first.
            batch.flush()
        close_iterator(server, iterator, is_async, done)
        context._flush_progress(ending=True)
        server.fail(call.id, error)
        return
    context._flush_progress(ending=True)
    server.send({"type": "end", "id": call.id})


def close_iterator(server, iterator, is_async, done):
    """Runs a generator's ``finally`` blocks after an early end."""
    if done:
        return
    try:
        if is_async:
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                future = asyncio.run_coroutine_threadsafe(closer(), server.event_loop())
                future.result(timeout=30)
        else:
            iterator.close()
    except BaseException as error:  # noqa: BLE001 - the first failure is what the parent hears
        sys.stderr.write(f"airlock worker: closing the stream of a call failed: {type(error).__name__}: {error}\n")
