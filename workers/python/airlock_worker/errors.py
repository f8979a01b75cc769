"""The errors a worker raises for the parent, and the traceback trim."""

from __future__ import annotations

import os


class ProtocolError(Exception):
    """The bytes from the parent are not a valid frame or message."""


class AbortError(Exception):
    """The parent cancelled the call (or its deadline passed)."""

    def __init__(self, message="The call was cancelled by the parent"):
        super().__init__(message)


class ShutdownError(Exception):
    """The worker is shutting down and accepts no new calls."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def trim_traceback(error):
    """Drops this package's own frames from the top of a handler's traceback."""
    tb = error.__traceback__
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _PACKAGE_DIR:
        tb = tb.tb_next
    if tb is not None:
        error.__traceback__ = tb
