"""A test authorization server: a P-256 signing key, its JWKS published on a loopback HTTP
server, and access tokens signed with it, as an OAuth 2.1 authorization server would issue them."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


class Issuer:
    """A signing key and the loopback server publishing its JWKS."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        numbers = self.key.public_key().public_numbers()
        jwks = json.dumps(
            {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig", "alg": "ES256",
                       "x": b64url(numbers.x), "y": b64url(numbers.y)}]}
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(jwks)))
                self.end_headers()
                self.wfile.write(jwks)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.issuer = f"{self.url}/issuer"

    def token(self, audience: str, scope: str, sub: str = "alice") -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": sub, "aud": audience, "scope": scope,
                  "iat": now, "exp": now + 300, "client_id": "python-sdk"}
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": "k1"})

    def close(self) -> None:
        self.http.shutdown()
