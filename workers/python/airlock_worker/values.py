"""The JavaScript values that have no Python type of their own: errors and regular expressions."""

from __future__ import annotations

import re


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
