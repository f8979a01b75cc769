"""The stdout guard (the real pipes kept for frames) and process exit."""

from __future__ import annotations

import os
import sys

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


def exit_now(code):
    """Ends the process at once (stderr flushed), from any thread."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def exit_as_system_exit(stop):
    """Ends the process as `sys.exit()` in a handler asked: the process exits,
    with a non-integer code written to stderr and exit status 1, as Python's
    own top level does."""
    code = stop.code
    if code is not None and not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    exit_now(code or 0)


def write_all(fd, data):
    """Writes all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]
