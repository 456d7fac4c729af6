"""A small Confluent-compatible schema registry on 127.0.0.1, for tests (no network, no Docker),
and the ways a registry can misbehave.

It speaks the part of the REST API that serializers and deserializers use: ``POST
/subjects/{subject}/versions`` registers a schema under a subject (the same text under the same
type keeps its id), ``GET /schemas/ids/{id}`` returns it (404 with error code 40403 when the id
is unknown) and ``GET /schemas/ids/{id}/versions`` lists the subjects it is registered under.
Protobuf schemas are kept as the serializer sends them (base64 of a serialized
FileDescriptorProto) and returned as such, which is what ``?format=serialized`` asks for.

Misbehaviour, set by the tests: ``status`` makes every request answer that HTTP status (429
throttling, 503 ...); :meth:`misbehave` makes the requests of a path (or under a prefix)
answer what it is given (any status and body, gzip-encoded, late, or trickled a byte at a
time); ``stop()`` closes the port (connection refused). ``tls`` serves HTTPS with a
certificate (:func:`certificate` makes one for 127.0.0.1 and its authority).
``gets`` counts the lookups per id (each starts by asking for the id's subjects), ``paths``
every path asked.
"""

from __future__ import annotations

import gzip
import json
import ssl
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Misbehaviour:
    status: int = 200
    body: bytes | None = b""  # None: the registry's own answer (after ``delay_seconds``)
    gzip: bool = False  # the body is sent gzip-compressed, with Content-Encoding: gzip
    drip_seconds: float = 0.0  # pause between the body's bytes
    delay_seconds: float = 0.0  # pause before answering
    content_type: str = "application/vnd.schemaregistry.v1+json"


class LocalSchemaRegistry:
    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.schemas: dict[int, dict] = {}
        self.subjects: dict[int, set[str]] = {}
        self.gets: Counter[int] = Counter()
        self.paths: list[str] = []
        self.status: int | None = None
        self.auth: str | None = None  # the Authorization header of the last request
        self.misbehaviours: dict[str, Misbehaviour] = {}
        self._stopping = threading.Event()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the headers and the body are two writes: no 40 ms wait between

            def log_message(self, *args) -> None:  # quiet
                pass

            def _answer(self, status: int, body: dict | list) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def _misbehave(self, misbehaviour: Misbehaviour) -> None:
                if registry._stopping.wait(misbehaviour.delay_seconds):
                    return
                if misbehaviour.body is None:
                    return self._route()
                body = gzip.compress(misbehaviour.body) if misbehaviour.gzip else misbehaviour.body
                self.send_response(misbehaviour.status)
                self.send_header("Content-Type", misbehaviour.content_type)
                if misbehaviour.gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if not misbehaviour.drip_seconds:
                    self.wfile.write(body)
                    return
                for index in range(len(body)):
                    if registry._stopping.wait(misbehaviour.drip_seconds):
                        return
                    self.wfile.write(body[index:index + 1])
                    self.wfile.flush()

            def do_GET(self) -> None:
                registry.auth = self.headers.get("Authorization")
                registry.paths.append(self.path)
                path = self.path.split("?", 1)[0]
                for pattern, misbehaviour in registry.misbehaviours.items():
                    if path == pattern or pattern.endswith("*") and path.startswith(pattern[:-1]):
                        return self._misbehave(misbehaviour)
                return self._route()

            def _route(self) -> None:
                if registry.status is not None:
                    return self._answer(registry.status, {"error_code": registry.status, "message": "unavailable"})
                path = self.path.split("?", 1)[0].rstrip("/").split("/")
                if len(path) in (4, 5) and path[1:3] == ["schemas", "ids"] and path[3].isdigit():
                    schema_id = int(path[3])
                    if len(path) == 5:
                        registry.gets[schema_id] += 1
                    if schema_id not in registry.schemas:
                        return self._answer(404, {"error_code": 40403, "message": f"Schema {schema_id} not found"})
                    if len(path) == 5 and path[4] == "versions":
                        return self._answer(200, [{"subject": s, "version": 1}
                                                  for s in sorted(registry.subjects[schema_id])])
                    if len(path) == 4:
                        return self._answer(200, registry.schemas[schema_id])
                return self._answer(404, {"error_code": 404, "message": f"no route {self.path}"})

            def do_POST(self) -> None:
                registry.auth = self.headers.get("Authorization")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if registry.status is not None:
                    return self._answer(registry.status, {"error_code": registry.status, "message": "unavailable"})
                path = self.path.split("?", 1)[0].rstrip("/").split("/")
                if len(path) == 4 and path[1] == "subjects" and path[3] == "versions":
                    schema_id = registry.register(body.get("schemaType", "AVRO"), body["schema"], subject=path[2])
                    return self._answer(200, {"id": schema_id})
                return self._answer(404, {"error_code": 404, "message": f"no route {self.path}"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def register(self, schema_type: str, text: str, subject: str = "orders-value") -> int:
        """The id of ``text`` (registered now if new) under ``subject``; ids count from 1."""
        for schema_id, known in self.schemas.items():
            if known["schema"] == text and known.get("schemaType", "AVRO") == schema_type:
                self.subjects[schema_id].add(subject)
                return schema_id
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = {"schema": text} | ({} if schema_type == "AVRO" else {"schemaType": schema_type})
        self.subjects[schema_id] = {subject}
        return schema_id

    def misbehave(self, path: str, misbehaviour: Misbehaviour) -> None:
        """Requests of ``path`` (its query aside; ``/prefix*``: every path under it) get
        ``misbehaviour``."""
        self.misbehaviours[path] = misbehaviour

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()


def certificate(directory: Path) -> tuple[Path, Path, Path]:
    """(authority.pem, server.pem, server.key): a certificate authority made here and a server
    certificate it signed for IP 127.0.0.1 (openssl)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test registry authority",
            "-keyout", "authority.key", "-out", "authority.pem",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
            "-out", "server.csr")
    (directory / "server.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                          "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "authority.pem", "-CAkey", "authority.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.cnf", "-out", "server.pem")
    return directory / "authority.pem", directory / "server.pem", directory / "server.key"
