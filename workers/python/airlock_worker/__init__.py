"""airlock worker for Python: serve handlers to an airlock parent.

An airlock parent (TypeScript, on Deno or Bun) starts this program as a
subprocess and talks to it over stdin/stdout with the frames of
docs/PROTOCOL.md. This package, standard library only, Python 3.9+, is the
whole worker side: the CBOR value codec (``encode``, ``decode``), the frames
(``frame``), the serve loop (``serve``: hello, concurrent calls on a thread
pool, cancel, shutdown drain, exit on end-of-file; ``stream`` for streaming
handlers), the definition (``define``, ``context``), the stdout guard
(``stdio``) and the program (``entry``).

A worker module defines its handlers::

    # workers/db.py
    import sqlite3
    from airlock_worker import define_worker

    db = None

    def open_db(path):
        global db
        db = sqlite3.connect(path, check_same_thread=False)

    def count(table):
        return db.execute(f"select count(*) from {table}").fetchone()[0]

    worker = define_worker({"open": open_db, "count": count})

or with the decorator::

    from airlock_worker import Worker

    worker = Worker(concurrency=1)

    @worker.op
    def count(table):
        ...

and the parent runs it with the `command` option::

    python3 /abs/path/airlock_worker.py /abs/path/workers/db.py

(``airlock_worker.py`` is the launcher kept beside this package's
directory.) The target is a file path or a dotted module name, optionally
followed by ``:attribute`` naming the definition; without it, the module's
only ``Worker`` (or its attribute ``worker``) is served. ``python3 -m
airlock_worker TARGET`` works too when the directory holding this package is
on ``sys.path``, and a module may also end with ``worker.serve()`` to be run
directly (the stdout guard is then installed only after the module body
ran).

Before the user's module is imported, file descriptor 1 is pointed at
stderr (so ``print``, C libraries and subprocesses all write to the log) and
file descriptor 0 at /dev/null; the real pipes are kept privately.

A handler that declares a keyword-only parameter ``context`` receives the
``CallContext`` of the call (``id``, ``op``, and ``cancelled``, a
``threading.Event`` set when the parent cancels the call or its deadline
passes); ``current_call()`` returns the same object from anywhere inside the
call. ``async def`` handlers run on one shared asyncio loop and are cancelled
as asyncio tasks. ``context.progress(value)`` reports progress to the
parent's ``onProgress`` without ending the call (throttled: at most one
report every 50 ms, the latest value winning).

A handler that is a generator function, or an async generator function (or
returns a generator or an async iterator), streams: each value it yields
travels to the parent as it comes, never more than the call's window ahead of
what the parent consumed; when the parent stops early the generator is closed
(its ``finally`` blocks run).

Values map as docs/python.md describes: dict, list, str, int, float, bool,
None, bytes (bytearray and memoryview too), datetime (UTC), set; typed arrays
arrive as a ``memoryview`` cast to the element format; errors arrive as
``WireError`` and any exception raised by a handler crosses with its class
name, message, traceback, own attributes and ``__cause__``.
"""

from __future__ import annotations

# The constants are imported too: they stay attributes of the package.
from ._cbor import ATTACHMENT_THRESHOLD_BYTES, MAX_DEPTH, MAX_ERROR_CHAIN  # noqa: F401
from .context import PROGRESS_INTERVAL_SECONDS, CallContext, current_call  # noqa: F401
from .decode import decode_value
from .define import DEFAULT_CONCURRENCY, RESERVED_NAMES, Worker, define_worker  # noqa: F401
from .encode import encode_value
from .entry import main
from .errors import AbortError, ProtocolError, ShutdownError
from .frame import DEFAULT_MAX_FRAME_BYTES, FRAME_HEADER_BYTES, FRAME_MAGIC, PROTOCOL_VERSION  # noqa: F401
from .serve import MESSAGE_VERSION  # noqa: F401
from .stdio import install_stdout_guard
from .stream import (  # noqa: F401
    DEFAULT_STREAM_WINDOW_BYTES,
    DEFAULT_STREAM_WINDOW_ITEMS,
    STREAM_BATCH_DELAY_SECONDS,
    STREAM_BATCH_VALUES,
)
from .values import RegExp, WireError

__all__ = [
    "AbortError",
    "CallContext",
    "ProtocolError",
    "RegExp",
    "ShutdownError",
    "WireError",
    "Worker",
    "current_call",
    "decode_value",
    "define_worker",
    "encode_value",
    "install_stdout_guard",
    "main",
]
