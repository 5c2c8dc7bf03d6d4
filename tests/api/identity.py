"""An external identity provider for token tests: an RSA key, its JWKS file, and a JWKS URL."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER, AUDIENCE = "https://idp.example.test/", "mnemos-test"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def write_jwks(directory: Path, kid: str, **fields: str) -> tuple[rsa.RSAPrivateKey, Path]:
    """A new RSA key and the JWKS file publishing its public half under `kid`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", **fields})
    path = directory / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


@contextmanager
def serving(jwks: Path) -> Iterator[str]:
    """Serves the JWKS file over HTTP on loopback; yields its URL."""
    body = jwks.read_bytes()

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's API
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()
