"""The tests' TCP proxy: a client that goes away while the proxy black-holes it ends its
upstream connection too, once forwarding resumes (a server would otherwise keep the connection,
and its transaction's locks, forever)."""

from __future__ import annotations

import socket

from worker_support import TcpProxy, wait_for


def test_a_client_gone_during_a_blackhole_closes_its_upstream_once_forwarding_resumes():
    server = socket.create_server(("127.0.0.1", 0))
    proxy = TcpProxy(server.getsockname())
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        upstream, _ = server.accept()
        proxy.set("blackhole")
        client.sendall(b"BEGIN")
        wait_for(lambda: proxy.connections == 1, 5, "the connection through the proxy")
        client.close()
        proxy.set("forward")
        upstream.settimeout(5)
        received = b""
        while chunk := upstream.recv(100):  # a timeout here: the proxy kept the upstream open
            received += chunk
        assert received == b"BEGIN", "what was held is delivered, then the end of the stream"
        upstream.close()
    finally:
        proxy.close()
        server.close()
