"""What the encoder and the decoder share: CBOR tags, limits and refusal paths."""

from __future__ import annotations

import datetime as _dt
import re
import struct
import sys

#: Binary values of at least this many bytes travel as attachments.
ATTACHMENT_THRESHOLD_BYTES = 65536
#: Containers nest at most this deep.
MAX_DEPTH = 512
#: An error cause chain is cut after this many errors.
MAX_ERROR_CHAIN = 16

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
