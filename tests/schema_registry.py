"""A small Confluent-compatible schema registry on 127.0.0.1, for tests (no network, no Docker).

It speaks the part of the REST API that serializers and deserializers use: ``POST
/subjects/{subject}/versions`` registers a schema (the same text under the same type keeps its
id) and ``GET /schemas/ids/{id}`` returns it, 404 with error code 40403 when the id is unknown.
Protobuf schemas are kept as the serializer sends them (base64 of a serialized
FileDescriptorProto) and returned as such, which is what ``?format=serialized`` asks for.
``status`` makes every request answer that HTTP status (429 throttling, 503 ...); ``stop()``
closes the port (connection refused). ``gets`` counts the lookups per id.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalSchemaRegistry:
    def __init__(self) -> None:
        self.schemas: dict[int, dict] = {}
        self.gets: Counter[int] = Counter()
        self.status: int | None = None
        self.auth: str | None = None  # the Authorization header of the last request
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                registry.auth = self.headers.get("Authorization")
                if registry.status is not None:
                    return self._answer(registry.status, {"error_code": registry.status, "message": "unavailable"})
                path = self.path.split("?", 1)[0].rstrip("/").split("/")
                if len(path) == 4 and path[1:3] == ["schemas", "ids"] and path[3].isdigit():
                    schema_id = int(path[3])
                    registry.gets[schema_id] += 1
                    if schema_id in registry.schemas:
                        return self._answer(200, registry.schemas[schema_id])
                    return self._answer(404, {"error_code": 40403, "message": f"Schema {schema_id} not found"})
                return self._answer(404, {"error_code": 404, "message": f"no route {self.path}"})

            def do_POST(self) -> None:
                registry.auth = self.headers.get("Authorization")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if registry.status is not None:
                    return self._answer(registry.status, {"error_code": registry.status, "message": "unavailable"})
                path = self.path.split("?", 1)[0].rstrip("/").split("/")
                if len(path) == 4 and path[1] == "subjects" and path[3] == "versions":
                    return self._answer(200, {"id": registry.register(body.get("schemaType", "AVRO"), body["schema"])})
                return self._answer(404, {"error_code": 404, "message": f"no route {self.path}"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def register(self, schema_type: str, text: str) -> int:
        """The id of ``text`` (registered now if new); ids count from 1."""
        for schema_id, known in self.schemas.items():
            if known["schema"] == text and known.get("schemaType", "AVRO") == schema_type:
                return schema_id
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = {"schema": text} | ({} if schema_type == "AVRO" else {"schemaType": schema_type})
        return schema_id

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
