"""airlock worker for Python: serve handlers to an airlock parent.

An airlock parent (TypeScript, on Deno or Bun) starts this program as a
subprocess and talks to it over stdin/stdout with the frames of
docs/PROTOCOL.md. This single module, standard library only, Python 3.9+,
is the whole worker side: the CBOR value codec, the frames, the serve loop
(hello, concurrent calls on a thread pool, cancel, shutdown drain, exit on
end-of-file) and the stdout guard.

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

The target is a file path or a dotted module name, optionally followed by
``:attribute`` naming the definition; without it, the module's only
``Worker`` (or its attribute ``worker``) is served. ``python3 -m
airlock_worker TARGET`` works too when this file is on ``sys.path``, and a
module may also end with ``worker.serve()`` to be run directly (the stdout
guard is then installed only after the module body ran).

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

import asyncio
import atexit
import codecs
import collections
import concurrent.futures
import contextvars
import datetime as _dt
import importlib
import importlib.util
import inspect
import io
import math
import os
import platform
import re
import struct
import sys
import threading
import time
import traceback

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

#: The frame layout version this module speaks (the frame header's byte 4).
PROTOCOL_VERSION = 1
#: The message version sent in the hello: 2 adds streams and progress.
MESSAGE_VERSION = 3
#: Values of a stream in flight (sent, not yet credited) when a call sets no window.
DEFAULT_STREAM_WINDOW_ITEMS = 1024
#: Payload bytes of a stream in flight when a call sets no window: 4 MiB.
DEFAULT_STREAM_WINDOW_BYTES = 4 * 1024 * 1024
#: Most values in one ``items`` message.
STREAM_BATCH_VALUES = 256
#: How long a stream's first gathered value may wait for others, in seconds.
STREAM_BATCH_DELAY_SECONDS = 0.002
#: The shortest gap between two progress messages of one call, in seconds.
PROGRESS_INTERVAL_SECONDS = 0.05
#: The four bytes every frame starts with.
FRAME_MAGIC = b"\x89ALK"
#: Bytes in a frame header.
FRAME_HEADER_BYTES = 16
#: Largest payload accepted from the parent by default: 256 MiB.
DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024
#: Binary values of at least this many bytes travel as attachments.
ATTACHMENT_THRESHOLD_BYTES = 65536
#: Calls a worker runs at once by default.
DEFAULT_CONCURRENCY = 16
#: Containers nest at most this deep.
MAX_DEPTH = 512
#: An error cause chain is cut after this many errors.
MAX_ERROR_CHAIN = 16
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

_TAG_DATE = 1
_TAG_BIGNUM = 2
_TAG_NEGATIVE_BIGNUM = 3
_TAG_URL = 32
_TAG_REGEXP = 35
_TAG_SET = 258
_TAG_MAP = 259
_TAG_ATTACHMENT = 27000
_TAG_ERROR = 27001
_TAG_ARRAY_BUFFER = 27002
_TAG_DATA_VIEW = 27003
_TAG_FLOAT16 = 84

#: RFC 8746 little-endian typed-array tags -> memoryview format.
_FORMAT_BY_TAG = {
    68: "B",  # Uint8ClampedArray
    69: "H",  # Uint16Array
    70: "I",  # Uint32Array
    71: "Q",  # BigUint64Array
    72: "b",  # Int8Array
    77: "h",  # Int16Array
    78: "i",  # Int32Array
    79: "q",  # BigInt64Array
    85: "f",  # Float32Array
    86: "d",  # Float64Array
}
#: (kind, item size) -> tag, for buffers going out. Kind: "u", "i", "f".
_TAG_BY_KIND = {
    ("i", 1): 72,
    ("u", 2): 69,
    ("i", 2): 77,
    ("u", 4): 70,
    ("i", 4): 78,
    ("u", 8): 71,
    ("i", 8): 79,
    ("f", 2): _TAG_FLOAT16,
    ("f", 4): 85,
    ("f", 8): 86,
}
_SAFE_INTEGER = 2**53 - 1
_UINT64_LIMIT = 2**64
_LITTLE_ENDIAN = sys.byteorder == "little"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_IDENTIFIER = re.compile(r"^[A-Za-z_$][\w$]*$")
_FLOAT64 = struct.Struct(">Bd")
_HEADER = struct.Struct(">4sB3sII")


def _replace_surrogates(error):
    # Lone surrogates cannot be UTF-8: U+FFFD each, as JavaScript's encoder does.
    return (b"\xef\xbf\xbd" * (error.end - error.start), error.end)


codecs.register_error("airlock-replace", _replace_surrogates)


# ---------------------------------------------------------------------------
# Public value types and errors
# ---------------------------------------------------------------------------


class ProtocolError(Exception):
    """The bytes from the parent are not a valid frame or message."""


class AbortError(Exception):
    """The parent cancelled the call (or its deadline passed)."""

    def __init__(self, message="The call was cancelled by the parent"):
        super().__init__(message)


class ShutdownError(Exception):
    """The worker is shutting down and accepts no new calls."""


class WireError(Exception):
    """An error value that came from the parent (tag 27001).

    ``name``, ``message`` and ``stack`` are the JavaScript error's; its other
    own properties are attributes of this object, and ``cause`` is also set
    as ``__cause__``. Raising or returning it sends it back unchanged.
    """

    def __init__(self, name, message, stack=None, **properties):
        super().__init__(message)
        self.name = name
        self.message = message
        self.stack = stack
        for key, value in properties.items():
            setattr(self, key, value)

    def __repr__(self):
        return f"WireError({self.name!r}, {self.message!r})"


class RegExp:
    """A JavaScript regular expression (tag 35): its ``source`` and ``flags``.

    ``compile()`` gives the nearest ``re.Pattern`` (flags i, m, s; named
    groups rewritten); JavaScript and Python syntax differ, so it may fail.
    """

    __slots__ = ("source", "flags")

    def __init__(self, source, flags=""):
        self.source = source
        self.flags = flags

    def compile(self):
        """The nearest Python ``re.Pattern``."""
        flags = 0
        for letter, flag in (("i", re.IGNORECASE), ("m", re.MULTILINE), ("s", re.DOTALL)):
            if letter in self.flags:
                flags |= flag
        source = re.sub(r"\(\?<(?![=!])", "(?P<", self.source)
        source = re.sub(r"\\k<(\w+)>", r"(?P=\1)", source)
        return re.compile(source, flags)

    def __eq__(self, other):
        return isinstance(other, RegExp) and (self.source, self.flags) == (other.source, other.flags)

    def __hash__(self):
        return hash((self.source, self.flags))

    def __repr__(self):
        return f"RegExp({self.source!r}, {self.flags!r})"


class _Refusal(Exception):
    """A value that cannot cross; ``path`` is built while unwinding."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what
        self.path = ""


def _format_path(path, root):
    if root == "":
        return path[1:] if path.startswith(".") else path or "message"
    return root + path


def _key_segment(key):
    if len(key) > 40:
        return "[" + _json_quote(key[:40] + "…") + "]"
    return "." + key if _IDENTIFIER.match(key) else "[" + _json_quote(key) + "]"


def _json_quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _preview(key):
    if isinstance(key, str):
        return _json_quote(key if len(key) <= 40 else key[:40] + "…")
    if isinstance(key, (bool, int, float)) or key is None:
        return repr(key)
    return "{…}" if isinstance(key, dict) else "[…]"


def _article(name):
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


# ---------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------


class _Encoder:
    __slots__ = ("out", "attachments", "area_bytes", "threshold", "active", "errors")

    def __init__(self, threshold):
        self.out = bytearray()
        self.attachments = []
        self.area_bytes = 0
        self.threshold = threshold
        self.active = set()
        self.errors = []

    def head(self, major, n):
        out = self.out
        m = major << 5
        if n < 24:
            out.append(m | n)
        elif n < 0x100:
            out.append(m | 24)
            out.append(n)
        elif n < 0x10000:
            out.append(m | 25)
            out += n.to_bytes(2, "big")
        elif n < 0x100000000:
            out.append(m | 26)
            out += n.to_bytes(4, "big")
        else:
            out.append(m | 27)
            out += n.to_bytes(8, "big")

    def text(self, s):
        try:
            data = s.encode("utf-8")
        except UnicodeEncodeError:
            data = s.encode("utf-8", "airlock-replace")
        self.head(3, len(data))
        self.out += data

    def binary(self, data):
        """``data``: bytes-like with format B; large ones become attachments."""
        n = len(data)
        if n >= self.threshold:
            self.head(6, _TAG_ATTACHMENT)
            self.out.append(0x82)
            self.head(0, self.area_bytes)
            self.head(0, n)
            self.attachments.append(data)
            self.area_bytes += n
            return
        self.head(2, n)
        self.out += data

    def value(self, v, depth):
        if v is None:
            self.out.append(0xF6)
            return
        t = type(v)
        if t is bool:
            self.out.append(0xF5 if v else 0xF4)
        elif t is str:
            self.text(v)
        elif t is int:
            self.integer(v)
        elif t is float:
            self.out += _FLOAT64.pack(0xFB, v)
        elif t is list or t is tuple:
            self.sequence(v, depth)
        elif t is dict:
            self.mapping(v, depth)
        elif t is bytes or t is bytearray:
            self.binary(v)
        else:
            self.other(v, depth)

    def integer(self, v):
        if -_SAFE_INTEGER <= v <= _SAFE_INTEGER or -_UINT64_LIMIT <= v < _UINT64_LIMIT:
            if v >= 0:
                self.head(0, v)
            else:
                self.head(1, -1 - v)
            return
        # Beyond 64 bits: a bignum (tag 2 or 3).
        if v >= 0:
            self.out.append(0xC2)
            n = v
        else:
            self.out.append(0xC3)
            n = -1 - v
        data = n.to_bytes((n.bit_length() + 7) // 8, "big")
        self.head(2, len(data))
        self.out += data

    def enter(self, v, depth):
        if depth > MAX_DEPTH:
            raise _Refusal(f"a value nested deeper than {MAX_DEPTH} levels")
        key = id(v)
        if key in self.active:
            raise _Refusal("a circular reference")
        self.active.add(key)
        return key

    def sequence(self, v, depth):
        key = self.enter(v, depth)
        self.head(4, len(v))
        i = 0
        try:
            for i, item in enumerate(v):
                self.value(item, depth + 1)
        except _Refusal as refusal:
            refusal.path = f"[{i}]" + refusal.path
            raise
        finally:
            self.active.discard(key)

    def mapping(self, v, depth):
        key = self.enter(v, depth)
        try:
            items = list(v.items())
            if all(type(k) is str or isinstance(k, str) for k, _ in items):
                self.head(5, len(items))
                k = ""
                try:
                    for k, item in items:
                        self.text(k)
                        self.value(item, depth + 1)
                except _Refusal as refusal:
                    refusal.path = _key_segment(k) + refusal.path
                    raise
            else:
                # Keys that are not all text: a Map (tag 259).
                self.head(6, _TAG_MAP)
                self.head(5, len(items))
                count = 0
                at_value = False
                k = None
                try:
                    for count, (k, item) in enumerate(items):
                        at_value = False
                        self.value(k, depth + 1)
                        at_value = True
                        self.value(item, depth + 1)
                except _Refusal as refusal:
                    segment = f".get({_preview(k)})" if at_value else f".keys()[{count}]"
                    refusal.path = segment + refusal.path
                    raise
        finally:
            self.active.discard(key)

    def other(self, v, depth):
        if isinstance(v, bool):
            self.out.append(0xF5 if v else 0xF4)
        elif isinstance(v, int):
            self.integer(int(v))
        elif isinstance(v, float):
            self.out += _FLOAT64.pack(0xFB, float(v))
        elif isinstance(v, str):
            self.text(str(v))
        elif isinstance(v, (bytes, bytearray)):
            self.binary(bytes(v))
        elif isinstance(v, memoryview):
            self.buffer(v)
        elif isinstance(v, (list, tuple)):
            self.sequence(v, depth)
        elif isinstance(v, dict):
            self.mapping(v, depth)
        elif isinstance(v, (set, frozenset)):
            key = self.enter(v, depth)
            try:
                self.head(6, _TAG_SET)
                self.head(4, len(v))
                i = 0
                try:
                    for i, item in enumerate(v):
                        self.value(item, depth + 1)
                except _Refusal as refusal:
                    refusal.path = f".values()[{i}]" + refusal.path
                    raise
            finally:
                self.active.discard(key)
        elif isinstance(v, _dt.datetime):
            self.date(v)
        elif isinstance(v, BaseException):
            self.error(v, depth)
        elif isinstance(v, RegExp):
            self.regexp(v.source, v.flags)
        elif isinstance(v, re.Pattern):
            self.pattern(v)
        else:
            self.refuse_or_buffer(v)

    def refuse_or_buffer(self, v):
        if isinstance(v, _dt.date):
            raise _Refusal(f"{_article(type(v).__name__)} (send a datetime instead)")
        if isinstance(v, (_dt.time, _dt.timedelta)):
            raise _Refusal(_article(type(v).__name__))
        if inspect.isroutine(v) or inspect.isclass(v):
            raise _Refusal("a function" if not inspect.isclass(v) else "a class")
        if inspect.iscoroutine(v) or inspect.isgenerator(v):
            raise _Refusal(_article(type(v).__name__))
        try:
            view = memoryview(v)
        except TypeError:
            view = None
        if view is not None:
            self.buffer(view)
            return
        name = type(v).__name__
        hint = ""
        if hasattr(v, "__dataclass_fields__"):
            hint = " (send dataclasses.asdict(value) instead)"
        elif type(v).__module__ not in ("builtins", "decimal", "fractions"):
            hint = "; send a dict instead"
        raise _Refusal(f"{_article(name)}{hint}")

    def buffer(self, view):
        fmt = view.format
        order = "@"
        if fmt[:1] in "@=<>!":
            order, fmt = fmt[0], fmt[1:]
        if order in ">!" and view.itemsize > 1:
            raise _Refusal(f"a big-endian buffer (format {view.format!r})")
        if len(fmt) != 1:
            raise _Refusal(f"a buffer of format {view.format!r}")
        size = view.itemsize
        if fmt in "Bc" and size == 1:
            self.binary(_raw(view))
            return
        kind = "u" if fmt in "BHILQN" else "i" if fmt in "bhilqn" else "f" if fmt in "efd" else None
        tag = _TAG_BY_KIND.get((kind, size)) if kind else None
        if tag is None:
            raise _Refusal(f"a buffer of format {view.format!r}")
        self.head(6, tag)
        self.binary(_raw(view))

    def date(self, v):
        if v.tzinfo is None or v.tzinfo.utcoffset(v) is None:
            v = v.replace(tzinfo=_dt.timezone.utc)
        delta = v - _EPOCH
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        self.head(6, _TAG_DATE)
        self.out += _FLOAT64.pack(0xFB, micros / 1_000_000)

    def regexp(self, source, flags):
        self.head(6, _TAG_REGEXP)
        if flags:
            self.out.append(0x82)
            self.text(source)
            self.text(flags)
        else:
            self.text(source)

    def pattern(self, p):
        if not isinstance(p.pattern, str):
            raise _Refusal("a bytes re.Pattern")
        flags = ""
        if p.flags & re.IGNORECASE:
            flags += "i"
        if p.flags & re.MULTILINE:
            flags += "m"
        if p.flags & re.DOTALL:
            flags += "s"
        if p.flags & (re.VERBOSE | re.DEBUG):
            raise _Refusal("a re.Pattern with a flag JavaScript lacks (re.VERBOSE)")
        self.regexp(p.pattern, flags)

    def error(self, e, depth):
        if any(e is seen for seen in self.errors):
            raise _Refusal("a circular reference")
        if isinstance(e, WireError):
            name, message, stack = str(e.name), str(e.message), e.stack
            skip = {"name", "message", "stack", "cause"}
        else:
            name = type(e).__name__
            try:
                message = str(e)
            except Exception:  # noqa: BLE001 - a broken __str__
                message = ""
            stack = _format_stack(e)
            skip = {"name", "message", "stack", "cause"}
        fields = []
        if isinstance(e, OSError):
            for key in ("errno", "strerror", "filename", "filename2"):
                value = getattr(e, key, None)
                if value is not None:
                    fields.append((key, value))
        group = getattr(e, "exceptions", None)
        if isinstance(group, tuple) and all(isinstance(x, BaseException) for x in group):
            fields.append(("errors", list(group)))
        try:
            for key, value in vars(e).items():
                if key.startswith("_") or key in skip:
                    continue
                fields.append((key, value))
        except TypeError:
            pass
        if isinstance(e, WireError):
            present = "cause" in vars(e)
            cause = vars(e).get("cause")
        else:
            cause = e.__cause__
            present = cause is not None
        has_cause = (
            present
            and len(self.errors) < MAX_ERROR_CHAIN - 1
            and cause is not e
            and not any(cause is seen for seen in self.errors)
        )
        self.head(6, _TAG_ERROR)
        self.head(5, 2 + (stack is not None) + has_cause + len(fields))
        self.text("name")
        self.text(name)
        self.text("message")
        self.text(message)
        if stack is not None:
            self.text("stack")
            self.text(str(stack))
        self.errors.append(e)
        try:
            if has_cause:
                self.text("cause")
                self.field(cause, depth + 1)
            for key, value in fields:
                self.text(key)
                self.field(value, depth + 1)
        finally:
            self.errors.pop()

    def field(self, value, depth):
        """An error field, or a placeholder text when it cannot cross."""
        saved = (len(self.out), len(self.attachments), self.area_bytes, len(self.errors), set(self.active))
        try:
            self.value(value, depth)
        except _Refusal as refusal:
            del self.out[saved[0]:]
            del self.attachments[saved[1]:]
            self.area_bytes = saved[2]
            del self.errors[saved[3]:]
            self.active = saved[4]
            what = refusal.what
            for article in ("an ", "a "):
                if what.startswith(article):
                    what = what[len(article):]
                    break
            self.text(f"[unserializable {what}]")


def _raw(view):
    """The bytes of a buffer, without a copy when it is contiguous."""
    if view.c_contiguous:
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return view.tobytes()


def _format_stack(e):
    try:
        return "".join(traceback.format_exception(type(e), e, e.__traceback__, chain=False)).rstrip("\n")
    except Exception:  # noqa: BLE001 - a broken exception
        return None


def encode_value(value, threshold=ATTACHMENT_THRESHOLD_BYTES, root="value"):
    """Encodes a value as a CBOR head plus its attachments.

    Returns ``(head, attachments, attachment_bytes)``: ``head`` is a
    ``bytearray``; ``attachments`` are the large binary values (views, no
    copy), laid out back to back after the head.

    Raises ``TypeError`` naming where a value that cannot cross sits, e.g.
    ``Cannot send value.rows[1]: a Decimal cannot cross to the parent process``.
    """
    encoder = _Encoder(threshold)
    try:
        encoder.value(value, 1)
    except _Refusal as refusal:
        raise TypeError(
            f"Cannot send {_format_path(refusal.path, root)}: {refusal.what} cannot cross to the parent process"
        ) from None
    except RecursionError:
        raise TypeError(f"Cannot send {root}: it is nested too deeply") from None
    return encoder.out, encoder.attachments, encoder.area_bytes


# ---------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------


class _Decoder:
    __slots__ = ("data", "pos", "end", "area", "lenient")

    def __init__(self, head, area, lenient=False):
        self.data = head
        self.pos = 0
        self.end = len(head)
        self.area = area
        self.lenient = lenient

    def malformed(self, detail):
        return ProtocolError(f"Cannot decode value: {detail} (at byte {self.pos})")

    def truncated(self):
        return self.malformed("the input ends in the middle of a value")

    def refuse(self, what):
        """A value Python cannot hold: refused, or None when lenient."""
        if self.lenient:
            return None
        raise _Refusal(what)

    def argument(self, info):
        if info < 24:
            return info
        if info > 27:
            if info == 31:
                raise self.malformed("indefinite lengths and break codes are not allowed")
            raise self.malformed(f"reserved additional information {info}")
        size = 1 << (info - 24)
        pos = self.pos
        if pos + size > self.end:
            raise self.truncated()
        self.pos = pos + size
        return int.from_bytes(self.data[pos : pos + size], "big")

    def length(self, info, unit=1):
        n = self.argument(info)
        if n * unit > self.end - self.pos:
            raise self.malformed(f"a length of {n} exceeds the {self.end - self.pos} bytes that are left")
        return n

    def item(self, depth):
        pos = self.pos
        if pos >= self.end:
            raise self.truncated()
        initial = self.data[pos]
        self.pos = pos + 1
        major = initial >> 5
        info = initial & 31
        if major == 0:
            return self.argument(info)
        if major == 1:
            return -1 - self.argument(info)
        if major == 2:
            n = self.length(info)
            start = self.pos
            self.pos = start + n
            return bytes(self.data[start : start + n])
        if major == 3:
            return self.text_body(self.length(info))
        if major == 4:
            n = self.length(info)
            if depth > MAX_DEPTH:
                raise self.too_deep()
            result = []
            i = 0
            try:
                for i in range(n):
                    result.append(self.item(depth + 1))
            except _Refusal as refusal:
                refusal.path = f"[{i}]" + refusal.path
                raise
            return result
        if major == 5:
            n = self.length(info, 2)
            if depth > MAX_DEPTH:
                raise self.too_deep()
            return self.object_entries(n, depth)
        if major == 6:
            return self.tag(self.argument(info), depth)
        return self.simple(info)

    def too_deep(self):
        return self.malformed(f"nesting deeper than {MAX_DEPTH} levels")

    def text_body(self, n):
        start = self.pos
        self.pos = start + n
        try:
            return str(self.data[start : start + n], "utf-8")
        except UnicodeDecodeError:
            self.pos = start
            raise self.malformed("a text string that is not valid UTF-8") from None

    def text_item(self, what):
        if self.pos >= self.end:
            raise self.truncated()
        initial = self.data[self.pos]
        if initial >> 5 != 3:
            raise self.malformed(f"{what} is not a text string")
        self.pos += 1
        return self.text_body(self.length(initial & 31))

    def object_entries(self, n, depth):
        result = {}
        key = ""
        try:
            for _ in range(n):
                key = self.text_item("a map key of a plain object")
                result[key] = self.item(depth + 1)
        except _Refusal as refusal:
            refusal.path = _key_segment(key) + refusal.path
            raise
        return result

    def container(self, major, unit, what):
        if self.pos >= self.end:
            raise self.truncated()
        initial = self.data[self.pos]
        if initial >> 5 != major:
            raise self.malformed(what)
        self.pos += 1
        return self.length(initial & 31, unit)

    def simple(self, info):
        if info == 20:
            return False
        if info == 21:
            return True
        if info == 22 or info == 23:
            return None
        if 25 <= info <= 27:
            size = 1 << (info - 24)
            pos = self.pos
            if pos + size > self.end:
                raise self.truncated()
            self.pos = pos + size
            return struct.unpack(">" + "efd"[info - 25], self.data[pos : pos + size])[0]
        if info == 31:
            raise self.malformed("indefinite lengths and break codes are not allowed")
        if info >= 28:
            raise self.malformed(f"reserved additional information {info}")
        raise self.malformed(f"unknown simple value {info}")

    def tag(self, tag, depth):
        if tag == _TAG_DATE:
            return self.date()
        if tag == _TAG_BIGNUM or tag == _TAG_NEGATIVE_BIGNUM:
            if self.pos >= self.end:
                raise self.truncated()
            initial = self.data[self.pos]
            if initial >> 5 != 2:
                raise self.malformed("a bignum (tag 2 or 3) that does not wrap a byte string")
            self.pos += 1
            n = self.length(initial & 31)
            start = self.pos
            self.pos = start + n
            value = int.from_bytes(self.data[start : start + n], "big")
            return value if tag == _TAG_BIGNUM else -1 - value
        if tag == _TAG_URL:
            return self.text_item("the content of a URL (tag 32)")
        if tag == _TAG_REGEXP:
            return self.regexp()
        if tag == _TAG_SET:
            n = self.container(4, 1, "a Set (tag 258) that does not wrap an array")
            if depth > MAX_DEPTH:
                raise self.too_deep()
            result = set()
            i = 0
            try:
                for i in range(n):
                    item = self.item(depth + 1)
                    try:
                        result.add(item)
                    except TypeError:
                        self.refuse(f"a Set member Python cannot hash ({_article(type(item).__name__)})")
            except _Refusal as refusal:
                refusal.path = f".values()[{i}]" + refusal.path
                raise
            return result
        if tag == _TAG_MAP:
            n = self.container(5, 2, "a Map (tag 259) that does not wrap a map")
            if depth > MAX_DEPTH:
                raise self.too_deep()
            result = {}
            i = 0
            key = None
            at_value = False
            try:
                for i in range(n):
                    at_value = False
                    key = self.item(depth + 1)
                    at_value = True
                    value = self.item(depth + 1)
                    try:
                        result[key] = value
                    except TypeError:
                        at_value = False
                        self.refuse(f"a Map key Python cannot hash ({_article(type(key).__name__)})")
            except _Refusal as refusal:
                segment = f".get({_preview(key)})" if at_value else f".keys()[{i}]"
                refusal.path = segment + refusal.path
                raise
            return result
        if tag == _TAG_ATTACHMENT:
            return bytes(self.attachment())
        if tag == _TAG_ERROR:
            n = self.container(5, 2, "an error (tag 27001) that does not wrap a map")
            if depth > MAX_DEPTH:
                raise self.too_deep()
            return self.error(self.object_entries(n, depth))
        if tag == _TAG_ARRAY_BUFFER or tag == _TAG_DATA_VIEW:
            return bytes(self.binary())
        if tag == _TAG_FLOAT16:
            data = self.binary()
            if len(data) % 2:
                raise self.malformed(f"{len(data)} bytes for a Float16Array, not a multiple of 2")
            return list(struct.unpack(f"<{len(data) // 2}e", data))
        fmt = _FORMAT_BY_TAG.get(tag)
        if fmt is not None:
            return self.typed_array(fmt)
        raise self.malformed(f"unknown tag {tag}")

    def date(self):
        if self.pos >= self.end:
            raise self.truncated()
        initial = self.data[self.pos]
        major = initial >> 5
        info = initial & 31
        if not (major <= 1 or (major == 7 and 25 <= info <= 27)):
            raise self.malformed("a date (tag 1) that does not wrap a number")
        seconds = self.item(1)
        if isinstance(seconds, float) and not math.isfinite(seconds):
            return self.refuse("an invalid Date")
        try:
            return _EPOCH + _dt.timedelta(microseconds=round(seconds * 1_000_000))
        except OverflowError:
            return self.refuse("a Date outside the years 1 to 9999 that datetime holds")

    def regexp(self):
        if self.pos >= self.end:
            raise self.truncated()
        if self.data[self.pos] >> 5 == 4:
            if self.container(4, 1, "") != 2:
                raise self.malformed("a RegExp (tag 35) array that is not [source, flags]")
            source = self.text_item("the source of a RegExp (tag 35)")
            return RegExp(source, self.text_item("the flags of a RegExp (tag 35)"))
        return RegExp(self.text_item("the content of a RegExp (tag 35)"))

    def binary(self):
        """A byte string or an attachment reference, as a memoryview."""
        if self.pos >= self.end:
            raise self.truncated()
        initial = self.data[self.pos]
        major = initial >> 5
        if major == 2:
            self.pos += 1
            n = self.length(initial & 31)
            start = self.pos
            self.pos = start + n
            return memoryview(self.data)[start : start + n]
        if major == 6:
            self.pos += 1
            if self.argument(initial & 31) == _TAG_ATTACHMENT:
                return self.attachment()
        raise self.malformed("a binary tag that wraps neither bytes nor an attachment")

    def attachment(self):
        n = self.container(4, 1, "an attachment (tag 27000) that does not wrap [offset, length]")
        if n != 2:
            raise self.malformed("an attachment (tag 27000) that is not [offset, length]")
        offset = self.attachment_number()
        length = self.attachment_number()
        if offset + length > len(self.area):
            raise self.malformed(
                f"an attachment [{offset}, {length}] outside the {len(self.area)}-byte attachment area"
            )
        return self.area[offset : offset + length]

    def attachment_number(self):
        if self.pos >= self.end:
            raise self.truncated()
        initial = self.data[self.pos]
        if initial >> 5 != 0:
            raise self.malformed("an attachment offset or length that is not an unsigned integer")
        self.pos += 1
        return self.argument(initial & 31)

    def typed_array(self, fmt):
        data = self.binary()
        size = struct.calcsize(fmt)
        if len(data) % size:
            raise self.malformed(f"{len(data)} bytes for a typed array of {size}-byte elements")
        if not _LITTLE_ENDIAN and size > 1:
            import array

            swapped = array.array(fmt, bytes(data))
            swapped.byteswap()
            return memoryview(swapped)
        return data.cast(fmt)

    def error(self, fields):
        name = fields.pop("name", None)
        message = fields.pop("message", None)
        if not isinstance(name, str) or not isinstance(message, str):
            raise self.malformed("an error (tag 27001) without a text name and message")
        stack = fields.pop("stack", None)
        if stack is not None and not isinstance(stack, str):
            raise self.malformed("an error (tag 27001) whose stack is not text")
        has_cause = "cause" in fields
        cause = fields.pop("cause", None)
        error = WireError(name, message, stack)
        for key, value in fields.items():
            try:
                setattr(error, key, value)
            except (AttributeError, TypeError):
                pass
        if has_cause:
            error.cause = cause
            if isinstance(cause, BaseException):
                error.__cause__ = cause
        return error


def decode_value(head, area=b""):
    """Decodes one CBOR head (and its attachment area) into Python values.

    Raises ``ProtocolError`` when the bytes are not one well-formed value of
    the protocol, and ``TypeError`` when a value cannot be held in Python
    (a Map key or Set member Python cannot hash, a Date outside datetime's
    range), naming where it sits.
    """
    decoder = _Decoder(bytes(head), memoryview(area))
    try:
        value = decoder.item(1)
    except _Refusal as refusal:
        raise TypeError(
            f"Cannot receive {_format_path(refusal.path, 'value')}: {refusal.what} cannot cross to a Python worker"
        ) from None
    except RecursionError:
        raise ProtocolError("Cannot decode value: nested too deeply for this Python") from None
    if decoder.pos != decoder.end:
        raise decoder.malformed(f"{decoder.end - decoder.pos} bytes follow the value")
    return value


# ---------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------


def _frame_chunks(head, attachments, area_bytes):
    payload = len(head) + area_bytes
    if payload > 0xFFFFFFFF:
        raise ValueError(f"Cannot frame a message of {payload} bytes: a frame holds at most {0xFFFFFFFF}")
    first = bytearray(_HEADER.pack(FRAME_MAGIC, PROTOCOL_VERSION, b"\0\0\0", payload, len(head)))
    first += head
    return [first, *attachments]


class _FrameReader:
    """Reads frames from a file descriptor; stray bytes go to ``on_stray``."""

    def __init__(self, fd, max_frame_bytes, on_stray):
        self.file = io.FileIO(fd, "rb", closefd=False)
        self.max = max_frame_bytes
        self.on_stray = on_stray
        self.buf = bytearray()
        self.eof = False

    def fill(self):
        if self.eof:
            return False
        chunk = self.file.read(1 << 16)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read(self):
        """The next frame as ``(head, area)``, or None at end-of-file."""
        buf = self.buf
        while True:
            if not buf and not self.fill():
                return None
            if not self._skip_stray():
                continue
            if len(buf) < FRAME_HEADER_BYTES:
                if not self.fill():
                    self._end()
                    return None
                continue
            magic, version, reserved, payload, head = _HEADER.unpack_from(buf)
            if version != PROTOCOL_VERSION:
                raise ProtocolError(f"Cannot read frame: protocol version {version}, expected {PROTOCOL_VERSION}")
            if reserved != b"\0\0\0":
                raise ProtocolError("Cannot read frame: reserved header bytes are not zero")
            if payload > self.max:
                raise ProtocolError(f"Cannot read frame: length {payload} exceeds maxFrameBytes {self.max}")
            if head > payload:
                raise ProtocolError(f"Cannot read frame: head length {head} exceeds payload length {payload}")
            have = len(buf) - FRAME_HEADER_BYTES
            if have >= payload:
                frame = bytes(buf[FRAME_HEADER_BYTES : FRAME_HEADER_BYTES + payload])
                del buf[: FRAME_HEADER_BYTES + payload]
            else:
                frame = bytearray(payload)
                view = memoryview(frame)
                view[:have] = buf[FRAME_HEADER_BYTES:]
                del buf[:]
                filled = have
                while filled < payload:
                    n = self.file.readinto(view[filled:])
                    if not n:
                        self.eof = True
                        sys.stderr.write(
                            f"airlock worker: a frame from the parent was cut short ({filled} of {payload} bytes)\n"
                        )
                        return None
                    filled += n
            view = memoryview(frame)
            return view[:head], view[head:]

    def _skip_stray(self):
        """Drops bytes before the next magic; False when more bytes are needed."""
        buf = self.buf
        n = min(len(buf), 4)
        if buf[:n] == FRAME_MAGIC[:n]:
            if n == 4:
                return True
            if not self.fill():
                self._end()
            return False
        start = 1
        while True:
            i = buf.find(0x89, start)
            if i == -1:
                i = len(buf)
                break
            tail = buf[i : i + 4]
            if FRAME_MAGIC.startswith(bytes(tail)):
                break
            start = i + 1
        self.on_stray(len(buf[:i]))
        del buf[:i]
        return False

    def _end(self):
        if self.buf:
            if len(self.buf) >= 4 and self.buf[:4] == FRAME_MAGIC:
                sys.stderr.write("airlock worker: a frame from the parent was cut short\n")
            else:
                self.on_stray(len(self.buf))
            del self.buf[:]
        self.eof = True


# ---------------------------------------------------------------------------
# The worker definition
# ---------------------------------------------------------------------------


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


_current = contextvars.ContextVar("airlock_call")


def current_call():
    """The ``CallContext`` of the call running in this thread or task.

    Raises ``LookupError`` outside a call.
    """
    return _current.get()


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
        _Server(self).run()


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


# ---------------------------------------------------------------------------
# Stdout guard and process exit
# ---------------------------------------------------------------------------

_wire = None  # (input fd, output fd) once the guard is installed


def install_stdout_guard():
    """Keeps the real stdin/stdout for frames; points fds 0 and 1 elsewhere.

    File descriptor 1 becomes a copy of stderr (``print``, C extensions and
    subprocesses write to the log) and 0 reads /dev/null. Idempotent.
    """
    global _wire
    if _wire is not None:
        return _wire
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed or replaced stdout
        pass
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    _wire = (wire_in, wire_out)
    return _wire


def _exit(code):
    """Ends the process at once (stderr flushed), from any thread."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def _exit_as_system_exit(stop):
    """Ends the process as `sys.exit()` in a handler asked: the process exits,
    with a non-integer code written to stderr and exit status 1, as Python's
    own top level does."""
    code = stop.code
    if code is not None and not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    _exit(code or 0)


def _write_all(fd, data):
    view = memoryview(data)
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


# ---------------------------------------------------------------------------
# The serve loop
# ---------------------------------------------------------------------------


class _Call:
    __slots__ = ("id", "op", "args", "context", "window_items", "window_bytes", "in_flight_items", "in_flight_bytes")

    def __init__(self, call_id, op, args, server=None, window_items=None, window_bytes=None):
        self.id = call_id
        self.op = op
        self.args = args
        self.context = CallContext(call_id, op, server)
        self.window_items = window_items or DEFAULT_STREAM_WINDOW_ITEMS
        self.window_bytes = window_bytes or DEFAULT_STREAM_WINDOW_BYTES
        self.in_flight_items = 0
        self.in_flight_bytes = 0


class _Batch:
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


class _Server:
    def __init__(self, definition):
        self.definition = definition
        self.wire_in, self.wire_out = install_stdout_guard()
        self.write_lock = threading.Lock()
        self.lock = threading.Condition()
        self.waiting = collections.deque()
        self.running = {}
        self.threads = 0
        self.idle = 0
        # Calls run at once: the definition's, or less after a "limit". A
        # thread takes the next queued call (in arrival order) only once its
        # answer is written, so the parent knows which calls never started.
        self.limit = definition.concurrency
        self.shutting_down = False
        self.acknowledged = False
        self.loop = None
        self.loop_lock = threading.Lock()
        self.ops = list(definition.handlers)
        # Values nest up to MAX_DEPTH levels, two frames each to decode.
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * MAX_DEPTH + 1000))

    # -- output -------------------------------------------------------------

    def send(self, message):
        """Writes one message; returns its payload bytes."""
        head, attachments, area_bytes = encode_value(message, root="")
        chunks = _frame_chunks(head, attachments, area_bytes)
        with self.write_lock:
            try:
                for chunk in chunks:
                    _write_all(self.wire_out, chunk)
            except OSError:
                # The parent is gone.
                _exit(0)
        return len(head) + area_bytes

    def answer(self, call_id, value):
        try:
            self.send({"type": "result", "id": call_id, "value": value})
        except TypeError as refusal:
            # The value cannot cross: answer with the TypeError naming where.
            self.fail(call_id, refusal)
        except Exception as error:  # noqa: BLE001 - a value that broke the encoder
            self.fail(call_id, TypeError(f"Cannot send value: {type(error).__name__}: {error}"))

    def fail(self, call_id, error):
        try:
            self.send({"type": "error", "id": call_id, "error": error})
        except Exception as broken:  # noqa: BLE001 - an error that broke the encoder
            text = f"{type(error).__name__} (it could not be sent: {type(broken).__name__}: {broken})"
            self.send({"type": "error", "id": call_id, "error": WireError("Error", text)})

    # -- dispatch -----------------------------------------------------------

    def run(self):
        self.send(
            {
                "type": "hello",
                "id": 0,
                "version": MESSAGE_VERSION,
                "pid": os.getpid(),
                "ops": self.ops,
                "runtime": f"python {platform.python_version()}",
                "concurrency": self.definition.concurrency,
                "idempotent": self.definition.idempotent,
            }
        )
        reader = _FrameReader(self.wire_in, self.definition.max_frame_bytes, self.stray)
        while True:
            try:
                frame = reader.read()
                if frame is None:
                    break
                self.handle(*frame)
            except ProtocolError as error:
                sys.stderr.write(f"airlock worker: cannot read from the parent: {error}\n")
                _exit(2)
            except OSError as error:
                sys.stderr.write(f"airlock worker: cannot read from the parent: {error}\n")
                _exit(2)
        # End-of-file: the parent is gone (or closed our stdin). Exit promptly.
        _exit(0)

    def stray(self, count):
        sys.stderr.write(f"airlock worker: ignoring {count} stray bytes on stdin\n")

    def handle(self, head, area):
        try:
            message = decode_value(head, area)
        except TypeError as refusal:
            # Well-formed, but a value Python cannot hold: answer that call.
            message = _Decoder(bytes(head), area, lenient=True).item(1)
            if isinstance(message, dict) and message.get("type") == "call" and _is_call_id(message.get("id")):
                text = str(refusal).replace("Cannot receive value.", "Cannot receive ", 1)
                self.fail(message["id"], TypeError(text))
                return
            raise ProtocolError(str(refusal)) from None
        if not isinstance(message, dict):
            raise ProtocolError("Cannot read message: the head is not a map")
        kind = message.get("type")
        if kind == "call":
            call_id = message.get("id")
            if not _is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "call" has an invalid id {call_id!r}')
            op = message.get("op")
            if not isinstance(op, str):
                raise ProtocolError('Cannot read message: "call" has no string "op"')
            args = message.get("args", [])
            if args is None:
                args = []
            if not isinstance(args, list):
                raise ProtocolError(f'Cannot read message: "call" {call_id} has args that are not a list')
            windows = []
            for key in ("windowItems", "windowBytes"):
                window = message.get(key)
                if window is not None and (type(window) is not int or window < 1):
                    raise ProtocolError(f'Cannot read message: "call" has an invalid "{key}" {window!r}')
                windows.append(window)
            self.admit(_Call(call_id, op, args, self, windows[0], windows[1]))
        elif kind == "credit":
            call_id = message.get("id")
            items = message.get("items")
            size = message.get("bytes")
            if not _is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "credit" has an invalid id {call_id!r}')
            for key, count in (("items", items), ("bytes", size)):
                if type(count) is not int or count < 0:
                    raise ProtocolError(f'Cannot read message: "credit" has an invalid "{key}" {count!r}')
            self.credit(call_id, items, size)
        elif kind == "cancel":
            call_id = message.get("id")
            if not _is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "cancel" has an invalid id {call_id!r}')
            self.cancel(call_id)
        elif kind == "limit":
            concurrency = message.get("concurrency")
            if type(concurrency) is not int or concurrency < 1:
                raise ProtocolError(f'Cannot read message: "limit" has an invalid "concurrency" {concurrency!r}')
            with self.lock:
                self.limit = min(self.definition.concurrency, concurrency)
        elif kind == "shutdown":
            self.shutdown()
        elif kind in ("hello", "fatal", "result", "error", "items", "end", "progress", "shutdown-ack"):
            sys.stderr.write(f'airlock worker: ignoring unexpected "{kind}" message from the parent\n')
        else:
            raise ProtocolError(f"Cannot read message: unknown type {kind!r}")

    def admit(self, call):
        with self.lock:
            if self.shutting_down:
                refused = True
            else:
                refused = False
                self.waiting.append(call)
                # Idle threads that have not woken yet still count as idle.
                if len(self.waiting) > self.idle and self.threads < self.limit:
                    self.threads += 1
                    threading.Thread(target=self.work, name=f"airlock-call-{self.threads}", daemon=True).start()
                self.lock.notify()
        if refused:
            self.fail(
                call.id,
                ShutdownError(f'Cannot run "{call.op}": the worker is shutting down and accepts no new calls'),
            )

    def credit(self, call_id, items, size):
        with self.lock:
            call = self.running.get(call_id)
            if call is None:
                return
            call.in_flight_items = max(0, call.in_flight_items - items)
            call.in_flight_bytes = max(0, call.in_flight_bytes - size)
            self.lock.notify_all()

    def cancel(self, call_id):
        dropped = None
        future = None
        with self.lock:
            call = self.running.get(call_id)
            if call is not None:
                call.context.cancelled.set()
                self.lock.notify_all()
                future = call.context._future
            else:
                for queued in self.waiting:
                    if queued.id == call_id:
                        dropped = queued
                        break
                if dropped is None:
                    return
                self.waiting.remove(dropped)
        if dropped is not None:
            self.fail(dropped.id, AbortError())
            self.check_drained()
        elif future is not None:
            future.cancel()

    def shutdown(self):
        with self.lock:
            if self.shutting_down:
                return
            self.shutting_down = True
        self.check_drained()

    def check_drained(self):
        with self.lock:
            if not self.shutting_down or self.running or self.waiting or self.acknowledged:
                return
            self.acknowledged = True
        self.send({"type": "shutdown-ack", "id": 0})
        try:
            atexit._run_exitfuncs()
        except Exception:  # noqa: BLE001 - exit anyway
            pass
        _exit(0)

    def work(self):
        while True:
            with self.lock:
                while not self.waiting:
                    self.idle += 1
                    self.lock.wait()
                    self.idle -= 1
                call = self.waiting.popleft()
                self.running[call.id] = call
            try:
                contextvars.copy_context().run(self.execute, call)
            finally:
                with self.lock:
                    self.running.pop(call.id, None)
                self.check_drained()

    def execute(self, call):
        handler = self.definition.handlers.get(call.op)
        if handler is None:
            served = ", ".join(f'"{op}"' for op in self.ops) or "no ops"
            self.fail(call.id, TypeError(f'Unknown op "{call.op}": this worker serves {served}'))
            return
        context = call.context
        _current.set(context)
        try:
            if self.definition._wants_context.get(call.op):
                value = handler(*call.args, context=context)
            else:
                value = handler(*call.args)
            if inspect.isawaitable(value):
                value = self.await_on_loop(value, context)
        except SystemExit as stop:
            _exit_as_system_exit(stop)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            context._flush_progress(ending=True)
            self.fail(call.id, AbortError())
            return
        except BaseException as error:  # noqa: BLE001 - every failure is an answer
            _trim_traceback(error)
            context._flush_progress(ending=True)
            self.fail(call.id, error)
            return
        if inspect.isgenerator(value) or inspect.isasyncgen(value) or (
            hasattr(value, "__anext__") and hasattr(value, "__aiter__")
        ):
            self.stream(call, value)
            return
        context._flush_progress(ending=True)
        self.answer(call.id, value)

    def stream(self, call, iterator):
        """Sends a streaming handler's values within the call's window, then ``end``."""
        context = call.context
        is_async = not inspect.isgenerator(iterator)
        done = False
        batch = _Batch(self, call)
        try:
            while True:
                if batch.room() <= 0:
                    batch.flush()
                    with self.lock:
                        while (
                            not context.cancelled.is_set()
                            and batch.error is None
                            and (call.in_flight_items >= call.window_items or call.in_flight_bytes >= call.window_bytes)
                        ):
                            self.lock.wait()
                if context.cancelled.is_set():
                    raise AbortError()
                if batch.error is not None:
                    raise batch.error
                try:
                    if is_async:
                        value = self.await_on_loop(iterator.__anext__(), context)
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
            _exit_as_system_exit(stop)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            batch.discard()
            self.close_iterator(iterator, is_async, done)
            context._flush_progress(ending=True)
            self.fail(call.id, AbortError())
            return
        except BaseException as error:  # noqa: BLE001 - every failure is an answer
            _trim_traceback(error)
            if isinstance(error, AbortError) and context.cancelled.is_set():
                batch.discard()
            else:
                # The values yielded before the failure go first.
                batch.flush()
            self.close_iterator(iterator, is_async, done)
            context._flush_progress(ending=True)
            self.fail(call.id, error)
            return
        context._flush_progress(ending=True)
        self.send({"type": "end", "id": call.id})

    def close_iterator(self, iterator, is_async, done):
        """Runs a generator's ``finally`` blocks after an early end."""
        if done:
            return
        try:
            if is_async:
                closer = getattr(iterator, "aclose", None)
                if closer is not None:
                    future = asyncio.run_coroutine_threadsafe(closer(), self.event_loop())
                    future.result(timeout=30)
            else:
                iterator.close()
        except BaseException as error:  # noqa: BLE001 - the first failure is what the parent hears
            sys.stderr.write(f"airlock worker: closing the stream of a call failed: {type(error).__name__}: {error}\n")

    def await_on_loop(self, awaitable, context):
        loop = self.event_loop()

        async def run():
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(run(), loop)
        with self.lock:
            context._future = future
            cancelled = context.cancelled.is_set()
        if cancelled:
            future.cancel()
        return future.result()

    def event_loop(self):
        with self.loop_lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="airlock-asyncio", daemon=True).start()
                self.loop = loop
            return self.loop


def _trim_traceback(error):
    """Drops the serve loop's own frames from the top of a handler's traceback."""
    own = _Server.execute.__code__.co_filename
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == own:
        tb = tb.tb_next
    if tb is not None:
        error.__traceback__ = tb


def _is_call_id(value):
    return type(value) is int and value >= 1


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _load(target):
    """Imports ``path/to/file.py`` or ``dotted.module``; returns (module, attribute)."""
    attribute = None
    spec = target
    if ":" in target and not os.path.exists(target):
        spec, attribute = target.rsplit(":", 1)
    if spec.endswith(".py") or os.sep in spec or os.path.exists(spec):
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'Cannot load worker module "{spec}": no such file')
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f'Cannot load worker module "{spec}"')
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(spec)
    return module, attribute


def _find_definition(module, attribute, target):
    if attribute is not None:
        found = getattr(module, attribute, None)
        if not isinstance(found, Worker):
            raise TypeError(
                f'Worker module "{target}" must define "{attribute}" as a Worker (define_worker(...) or Worker()), found {type(found).__name__}'
            )
        return found
    named = getattr(module, "worker", None)
    if isinstance(named, Worker):
        return named
    found = [value for value in vars(module).values() if isinstance(value, Worker)]
    unique = []
    for value in found:
        if not any(value is seen for seen in unique):
            unique.append(value)
    if len(unique) == 1:
        return unique[0]
    detail = "none" if not unique else f"{len(unique)}; name one with {target}:attribute"
    raise TypeError(
        f'Worker module "{target}" must define one Worker (define_worker(...) or Worker()) at module level, found {detail}'
    )


def _fatal(phase, error):
    try:
        _, wire_out = install_stdout_guard()
        head, attachments, area_bytes = encode_value({"type": "fatal", "id": 0, "phase": phase, "error": error})
        for chunk in _frame_chunks(head, attachments, area_bytes):
            _write_all(wire_out, chunk)
    except Exception:  # noqa: BLE001 - the parent cannot hear it: stderr alone
        try:
            sys.stderr.write("".join(traceback.format_exception(type(error), error, error.__traceback__)))
        except Exception:  # noqa: BLE001
            pass
    # Once sent, the parent's start error carries the traceback: printing it
    # here too showed it three times (live, in the message, in the tail).
    _exit(1)


def main(argv=None):
    """Runs ``airlock_worker TARGET``: import TARGET and serve its Worker."""
    install_stdout_guard()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        sys.stderr.write(
            "usage: python3 airlock_worker.py path/to/worker.py[:attribute]\n"
            "       python3 -m airlock_worker package.module[:attribute]\n"
        )
        _exit(2)
    target = argv[0]
    try:
        module, attribute = _load(target)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        _fatal("import", error)
    try:
        definition = _find_definition(module, attribute, target)
    except BaseException as error:  # noqa: BLE001
        _fatal("definition", error)
    _Server(definition).run()


if __name__ == "__main__":
    # Importers of "airlock_worker" must get this module, not a second copy.
    sys.modules.setdefault("airlock_worker", sys.modules[__name__])
    main()
