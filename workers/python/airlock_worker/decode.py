"""The CBOR decoder: a head plus attachments to Python values (docs/PROTOCOL.md)."""

from __future__ import annotations

import datetime as _dt
import math
import struct

from ._cbor import (
    _EPOCH,
    _FORMAT_BY_TAG,
    _LITTLE_ENDIAN,
    _TAG_ARRAY_BUFFER,
    _TAG_ATTACHMENT,
    _TAG_BIGNUM,
    _TAG_DATA_VIEW,
    _TAG_DATE,
    _TAG_ERROR,
    _TAG_FLOAT16,
    _TAG_MAP,
    _TAG_NEGATIVE_BIGNUM,
    _TAG_REGEXP,
    _TAG_SET,
    _TAG_URL,
    MAX_DEPTH,
    _article,
    _format_path,
    _key_segment,
    _preview,
    _Refusal,
)
from .errors import ProtocolError
from .values import RegExp, WireError


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


def decode_lenient(head, area):
    """Decodes a well-formed head with values Python cannot hold as None.

    For a message ``decode_value`` refused: its call id is still readable.
    """
    return _Decoder(bytes(head), area, lenient=True).item(1)
