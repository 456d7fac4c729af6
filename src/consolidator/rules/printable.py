"""What a printed line, a log line or an error message may hold of a value someone else controls
(a producer's group key, item id, field names; an ack's batch id; a setting as typed).

One rule for every such value:

- :func:`printable`: every character that is not printable (``str.isprintable``: the C0 and C1
  control characters with ESC, BEL, DEL and the line breaks, the bidirectional and other
  format characters such as U+202E, surrogates, unassigned code points, spaces other than
  U+0020) is written as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``), so the text can
  never move a terminal's cursor, set its title, clear it or reorder what it shows;
- :func:`echoed`: a value quoted in a message: its ``repr`` (printable, quoted), at most
  ``limit`` characters, and when cut, how long the whole value was. A 250 KB batch id in an ack
  stays an 80-character quote in the log line that refuses it.

Pure: no I/O, no third-party imports; every layer may use it.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
ECHO_LIMIT = 80  # characters of a quoted value in a message


def _escape(char: str) -> str:
    if char.isprintable():
        return char
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """``str(value)`` with every non-printable character as a visible escape (module docstring);
    a value of printable characters is returned as it is."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(map(_escape, text))


def echoed(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` quoted for a message: its ``repr`` made printable, cut to ``limit`` characters
    with ``...`` and the length of the whole value (characters of a string, else of its repr)."""
    shown = printable(repr(value))
    if len(shown) <= limit:
        return shown
    size = len(value) if isinstance(value, (str, bytes)) else len(shown)
    unit = "bytes" if isinstance(value, bytes) else "characters"
    return f"{shown[:limit]}... ({size:,} {unit})"
