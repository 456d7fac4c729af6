"""One bounded HTTP GET, for the schema registry: the standard library's HTTP parsing over a
socket that is never given more time or bytes than the exchange is allowed.

Guarantees of :func:`get`:

- one deadline for the whole exchange: connecting, the TLS handshake, sending the request and
  every read of the answer each get what is left of it, so an answer trickling in a byte at a
  time ends at the deadline, not after a read timeout per byte (name resolution is the system
  resolver's and is not under the deadline);
- at most :data:`~consolidator.sources.formats.limits.MAX_RESPONSE_HEAD_BYTES` plus ``max_bytes`` are
  received, and the body is at most ``max_bytes`` as received and once decompressed (gzip or
  deflate, the encodings it asks for): a small compressed body that inflates to hundreds of MB
  is stopped at ``max_bytes``. An ``Content-Length`` over it is refused before the body is read;
- redirects are not followed (the status is returned), nothing is cached, one connection per
  request (closed after it);
- TLS is verified against the system's certificate authorities (``SSL_CERT_FILE`` may name
  others) with the host name checked.

It raises :class:`Unreachable` for every transport failure (no connection, TLS, the deadline,
malformed HTTP, an unknown encoding, a body cut short) and :class:`TooLarge` past the byte caps.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

from consolidator.sources.formats.limits import MAX_RESPONSE_HEAD_BYTES

_CHUNK = 64 * 1024
_DECOMPRESS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class Unreachable(Exception):
    """No complete HTTP answer within the deadline (the message says why)."""


class TooLarge(Exception):
    """The answer has more bytes than allowed."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # decompressed


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes; each read waits at most what is left until ``deadline`` and the
    reads stop at ``limit`` bytes received."""

    def __init__(self, sock: socket.socket, deadline: float, limit: int) -> None:
        self.sock, self.deadline, self.limit, self.received = sock, deadline, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed while the answer was being received")
        if self.received > self.limit:
            raise TooLarge(f"more than {self.limit} bytes received")
        self.sock.settimeout(left)
        count = self.sock.recv_into(buffer, min(len(buffer), self.limit + 1 - self.received))
        self.received += count
        return count


class _Connection:
    """What :class:`http.client.HTTPResponse` reads from: ``makefile`` only."""

    def __init__(self, reader: _DeadlineReader) -> None:
        self.reader = reader

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self.reader, 8192)


def tls_context() -> ssl.SSLContext:
    """Certificates verified against the system's authorities, host names checked."""
    return ssl.create_default_context()


def get(base_url: str, path: str, *, headers: dict[str, str], deadline: float, max_bytes: int,
        context: ssl.SSLContext | None = None) -> Answer:
    """``GET`` ``path`` (with its query) under ``base_url``, ending by ``deadline`` (a
    ``time.monotonic`` instant), with a body of at most ``max_bytes``."""
    parts = urlsplit(base_url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    request = "".join([f"GET {parts.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {parts.netloc}\r\n",
                       *(f"{name}: {value}\r\n" for name, value in headers.items()),
                       "Accept-Encoding: gzip, deflate\r\nConnection: close\r\n\r\n"]).encode("latin-1")

    def left() -> float:
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise TimeoutError("the deadline passed")
        return seconds

    sock: socket.socket | None = None
    try:
        sock = socket.create_connection((host, port), timeout=left())
        if secure:
            sock.settimeout(left())  # the handshake as a whole
            sock = (context or tls_context()).wrap_socket(sock, server_hostname=host)
        sock.settimeout(left())  # sendall as a whole
        sock.sendall(request)
        reader = _DeadlineReader(sock, deadline, MAX_RESPONSE_HEAD_BYTES + max_bytes)
        response = http.client.HTTPResponse(_Connection(reader), method="GET")  # type: ignore[arg-type]
        response.begin()
        return Answer(response.status, _body(response, max_bytes))
    except TooLarge:
        raise
    except TimeoutError as exc:
        raise Unreachable(f"no complete answer in time: {exc}") from None
    except (OSError, http.client.HTTPException, ValueError, zlib.error) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None
    finally:
        if sock is not None:
            sock.close()


def _body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    length = response.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > max_bytes:
        raise TooLarge(f"Content-Length {int(length)} is more than {max_bytes} bytes")
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", *_DECOMPRESS):
        raise Unreachable(f"the answer's Content-Encoding {encoding[:40]!r} was not asked for")
    inflater = zlib.decompressobj(_DECOMPRESS[encoding]) if encoding in _DECOMPRESS else None
    body = bytearray()
    received = 0
    while chunk := response.read(_CHUNK):
        received += len(chunk)
        if received > max_bytes:
            raise TooLarge(f"the body is more than {max_bytes} bytes")
        body += chunk if inflater is None else inflater.decompress(chunk, max_bytes + 1 - len(body))
        if len(body) > max_bytes or (inflater is not None and inflater.unconsumed_tail):
            raise TooLarge(f"the body inflates to more than {max_bytes} bytes")
    if inflater is not None:
        body += inflater.flush()
        if len(body) > max_bytes:
            raise TooLarge(f"the body inflates to more than {max_bytes} bytes")
        if not inflater.eof:
            raise Unreachable(f"the {encoding} body is cut short")
    return bytes(body)
