"""What SQS accepts in a message's text fields, and how a group key is made to fit them.

SQS refuses, forever, a message whose body or string attribute holds a character outside
``#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF``, and a FIFO
``MessageGroupId`` that is not 1 to 128 characters of ASCII letters, digits and punctuation.
Ingest stores any group key of 1 to 191 characters (control characters, U+FFFF included), so the
SQS sink never sends a key raw where these rules could refuse it:

- the ``group_key`` attribute holds the key itself when every character is allowed, else the
  base64 of its UTF-8 bytes and an attribute ``group_key_encoding`` = ``base64``;
- the FIFO group id is the key itself when it is a valid group id, else ``sha256:`` and the hex
  SHA-256 of its UTF-8 bytes (71 characters), with an attribute ``group_id_encoding`` = ``sha256``;
- a JSON body has every character outside the allowed set written as a ``\\uXXXX`` escape (the
  same JSON value; in valid JSON such a character can only stand inside a string).

:func:`is_sqs_text` and :func:`is_group_id` are the one statement of the rules; the tests check
every message the sink sends with them. :func:`escaped_bytes` is the size of an escaped body,
the measure of the SQS sink's byte cap (the tests hold it equal to the escaped body's size).
"""

from __future__ import annotations

import base64
import hashlib
import re

# The XML 1.0 character set SQS documents for message bodies and string attributes.
_SQS_TEXT = re.compile("[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*")
_NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# MessageGroupId: 1 to 128 of a-z, A-Z, 0-9 and the punctuation !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
_GROUP_ID = re.compile(r"[0-9A-Za-z!-/:-@\[-`{-~]{1,128}")
MAX_GROUP_ID_CHARS = 128

BASE64 = "base64"
SHA256 = "sha256"


def is_sqs_text(text: str) -> bool:
    """True when SQS accepts ``text`` as a message body or a string attribute value."""
    return _SQS_TEXT.fullmatch(text) is not None


def is_group_id(text: str) -> bool:
    """True when SQS accepts ``text`` as a FIFO ``MessageGroupId`` (or deduplication id)."""
    return _GROUP_ID.fullmatch(text) is not None


def key_attribute(group_key: str) -> tuple[str, str | None]:
    """The ``group_key`` attribute's value and its encoding (None: the key itself)."""
    if group_key and is_sqs_text(group_key):
        return group_key, None
    return base64.b64encode(group_key.encode()).decode(), BASE64


def group_id(group_key: str) -> tuple[str, str | None]:
    """The FIFO group id of a group key and its encoding (None: the key itself). One key always
    gets one id, so the messages of a group keep their order."""
    if is_group_id(group_key):
        return group_key, None
    return f"{SHA256}:{hashlib.sha256(group_key.encode()).hexdigest()}", SHA256


#: The UTF-8 encodings of the characters SQS refuses: C0 controls but tab, LF and CR (1 byte),
#: surrogates (3 bytes; never in text Python encodes), U+FFFE and U+FFFF (3 bytes).
_CONTROLS = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_SURROGATES_UTF8 = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")


def escaped_bytes(body: bytes) -> int:
    """The size in bytes of the body the SQS sink sends for the encoded message ``body``:
    ``escape_json(body.decode())`` in UTF-8, each refused character a 6-byte escape, counted
    without building it (the byte cap of an SQS sink counts bodies with it)."""
    extra = 3 * (body.count(b"\xef\xbf\xbe") + body.count(b"\xef\xbf\xbf"))
    extra += 5 * (len(body) - len(body.translate(None, _CONTROLS)))
    if b"\xed" in body:
        extra += 3 * len(_SURROGATES_UTF8.findall(body))
    return len(body) + extra


def escape_json(body: str) -> str:
    """A JSON text with each character SQS refuses written as a ``\\uXXXX`` escape (every such
    character is in the BMP, so one escape each). Unchanged, and not copied, when none is there."""
    if is_sqs_text(body):
        return body
    return _NOT_SQS_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", body)
