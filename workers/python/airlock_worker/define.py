"""The worker definition: handlers by op name, with concurrency and idempotent ops."""

from __future__ import annotations

import inspect

from .frame import DEFAULT_MAX_FRAME_BYTES
from .serve import Server
from .stdio import install_stdout_guard

#: Calls a worker runs at once by default.
DEFAULT_CONCURRENCY = 16
#: Handler names the parent's typed proxy never forwards.
RESERVED_NAMES = (
    "then",
    "catch",
    "finally",
    "call",
    "stream",
    "close",
    "restart",
    "invalidate",
    "stats",
    "pid",
    "constructor",
    "prototype",
    "__proto__",
    "toString",
    "toLocaleString",
    "valueOf",
    "toJSON",
    "inspect",
)


class Worker:
    """What a worker process serves: handlers by op name, plus options.

    ``concurrency``: calls run at once (each on its own thread of a pool of
    that size; with 1, every call runs on the same thread, so thread-bound
    objects such as a default ``sqlite3`` connection can be kept between
    calls). ``idempotent``: ops that are safe to run twice, retried by the
    parent after a crash. ``max_frame_bytes``: largest frame accepted.
    """

    def __init__(
        self,
        handlers=None,
        *,
        concurrency=DEFAULT_CONCURRENCY,
        idempotent=(),
        max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
    ):
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"Cannot define worker: concurrency must be a whole number >= 1, received {concurrency!r}")
        self.concurrency = concurrency
        self.max_frame_bytes = max_frame_bytes
        self.handlers = {}
        self._wants_context = {}
        for name, handler in (handlers or {}).items():
            self.add(name, handler)
        self.idempotent = [str(name) for name in idempotent]

    def add(self, name, handler):
        """Adds a handler under ``name``."""
        if not isinstance(name, str) or name == "":
            raise TypeError(f"Cannot define worker: handler names must be non-empty strings, received {name!r}")
        if name in RESERVED_NAMES:
            raise TypeError(
                f'Cannot define worker: handler name "{name}" is reserved (reserved: {", ".join(RESERVED_NAMES)})'
            )
        if not callable(handler):
            raise TypeError(f'Cannot define worker: handler "{name}" must be callable, received {type(handler).__name__}')
        self.handlers[name] = handler
        self._wants_context[name] = _wants_context(handler)
        return handler

    def op(self, function=None, *, name=None):
        """Decorator: ``@worker.op``, or ``@worker.op("name")`` to serve it under another name."""
        if isinstance(function, str):
            name, function = function, None

        def register(fn):
            self.add(name or fn.__name__, fn)
            return fn

        return register(function) if function is not None else register

    def serve(self):
        """Serves this definition on stdin/stdout until shutdown or end-of-file; never returns."""
        install_stdout_guard()
        Server(self).run()


def define_worker(handlers, *, concurrency=DEFAULT_CONCURRENCY, idempotent=()):
    """Defines a worker from a dict of handlers: ``{"op": function}``."""
    if not isinstance(handlers, dict):
        raise TypeError(
            f"Cannot define worker: handlers must be a dict of functions, received {type(handlers).__name__}"
        )
    return Worker(handlers, concurrency=concurrency, idempotent=idempotent)


def _wants_context(handler):
    try:
        parameter = inspect.signature(handler).parameters.get("context")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind == inspect.Parameter.KEYWORD_ONLY
