"""The CBOR encoder: Python values to a head plus attachments (docs/PROTOCOL.md)."""

from __future__ import annotations

import codecs
import datetime as _dt
import inspect
import re
import traceback

from ._cbor import (
    _EPOCH,
    _FLOAT64,
    _SAFE_INTEGER,
    _TAG_ATTACHMENT,
    _TAG_BY_KIND,
    _TAG_DATE,
    _TAG_ERROR,
    _TAG_MAP,
    _TAG_REGEXP,
    _TAG_SET,
    _UINT64_LIMIT,
    ATTACHMENT_THRESHOLD_BYTES,
    MAX_DEPTH,
    MAX_ERROR_CHAIN,
    _article,
    _format_path,
    _key_segment,
    _preview,
    _Refusal,
)
from .values import RegExp, WireError


def _replace_surrogates(error):
    # Lone surrogates cannot be UTF-8: U+FFFD each, as JavaScript's encoder does.
    return (b"\xef\xbf\xbd" * (error.end - error.start), error.end)


codecs.register_error("airlock-replace", _replace_surrogates)


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
