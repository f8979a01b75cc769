"""The call a handler runs for: its id, op, cancellation and throttled progress."""

from __future__ import annotations

import contextvars
import sys
import threading
import time

from .errors import AbortError

#: The shortest gap between two progress messages of one call, in seconds.
PROGRESS_INTERVAL_SECONDS = 0.05


class CallContext:
    """The call a handler runs for.

    Attributes: ``id`` (the request id), ``op`` (the op's name), and
    ``cancelled``, a ``threading.Event`` set when the parent cancels the call
    (explicitly, or because its deadline passed).
    """

    __slots__ = (
        "id",
        "op",
        "cancelled",
        "_future",
        "_server",
        "_progress_lock",
        "_progress_at",
        "_progress_pending",
        "_progress_timer",
        "_ended",
    )

    def __init__(self, call_id, op, server=None):
        self.id = call_id
        self.op = op
        self.cancelled = threading.Event()
        self._future = None
        self._server = server
        self._progress_lock = threading.Lock()
        self._progress_at = 0.0
        self._progress_pending = None
        self._progress_timer = None
        self._ended = False

    def progress(self, value):
        """Reports progress to the parent without ending the call.

        Throttled: at most one report every 50 ms goes out, the latest value
        winning; one held back is sent before the call's answer. Raises
        ``TypeError`` when a value sent at once cannot cross.
        """
        if self._server is None:
            return
        with self._progress_lock:
            if self._ended:
                return
            now = time.monotonic()
            wait = self._progress_at + PROGRESS_INTERVAL_SECONDS - now
            if wait > 0:
                self._progress_pending = (value,)
                if self._progress_timer is None:
                    timer = threading.Timer(wait, self._flush_progress)
                    timer.daemon = True
                    self._progress_timer = timer
                    timer.start()
                return
            self._progress_pending = None
            self._progress_at = now
        self._server.send({"type": "progress", "id": self.id, "value": value})

    def _flush_progress(self, ending=False):
        with self._progress_lock:
            if self._progress_timer is not None:
                self._progress_timer.cancel()
                self._progress_timer = None
            pending = self._progress_pending
            self._progress_pending = None
            self._progress_at = time.monotonic()
            if ending:
                self._ended = True
        if pending is not None and self._server is not None:
            try:
                self._server.send({"type": "progress", "id": self.id, "value": pending[0]})
            except Exception as error:  # noqa: BLE001 - the handler has moved on
                sys.stderr.write(f"airlock worker: cannot send progress of call {self.id}: {error}\n")

    def check(self):
        """Raises ``AbortError`` if the call was cancelled."""
        if self.cancelled.is_set():
            raise AbortError()

    def sleep(self, seconds):
        """Sleeps, or raises ``AbortError`` as soon as the call is cancelled."""
        if self.cancelled.wait(seconds):
            raise AbortError()

    def __repr__(self):
        return f"CallContext(id={self.id}, op={self.op!r}, cancelled={self.cancelled.is_set()})"


call_context_var = contextvars.ContextVar("airlock_call")


def current_call():
    """The ``CallContext`` of the call running in this thread or task.

    Raises ``LookupError`` outside a call.
    """
    return call_context_var.get()
