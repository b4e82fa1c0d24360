"""Local http(s) servers for tests: each answers a path from a table of routes
(``{path: (status, headers, body)}``) on a real socket, in a daemon thread."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

Routes = dict[str, tuple[int, dict[str, str], bytes]]


class RoutesHandler(BaseHTTPRequestHandler):
    """Answers GET from its server's ``routes``; anything else is a 404."""

    def do_GET(self) -> None:  # noqa: N802 -- http.server's naming
        status, headers, body = self.server.routes.get(self.path, (404, {}, b"not found"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve(host: str, routes: Routes, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    """A started server on ``host`` (a free port); the caller ends it with ``stop``."""
    server = ThreadingHTTPServer((host, 0), RoutesHandler)
    server.routes = routes
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def self_signed(directory: Path, name: str, ip: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``ip`` (its own CA) and its key, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a certificate (apt-get install openssl)")
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={ip}",
         "-addext", f"subjectAltName=IP:{ip}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key
