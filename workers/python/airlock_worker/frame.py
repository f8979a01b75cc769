"""Frames: the 16-byte header, then the payload (docs/PROTOCOL.md)."""

from __future__ import annotations

import io
import struct
import sys

from .errors import ProtocolError

#: The frame layout version this module speaks (the frame header's byte 4).
PROTOCOL_VERSION = 1
#: The four bytes every frame starts with.
FRAME_MAGIC = b"\x89ALK"
#: Bytes in a frame header.
FRAME_HEADER_BYTES = 16
#: Largest payload accepted from the parent by default: 256 MiB.
DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024
_HEADER = struct.Struct(">4sB3sII")


def frame_chunks(head, attachments, area_bytes):
    """The chunks to write for one message: header and head, then the attachments."""
    payload = len(head) + area_bytes
    if payload > 0xFFFFFFFF:
        raise ValueError(f"Cannot frame a message of {payload} bytes: a frame holds at most {0xFFFFFFFF}")
    first = bytearray(_HEADER.pack(FRAME_MAGIC, PROTOCOL_VERSION, b"\0\0\0", payload, len(head)))
    first += head
    return [first, *attachments]


class FrameReader:
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
