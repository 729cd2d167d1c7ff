"""The webhook server's TLS context and how a certificate gets into it (shared by the operator and
the webhook's server process, which must not import the API client)."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path


def server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def load_chain(context: ssl.SSLContext, tls_crt: bytes, tls_key: bytes) -> None:
    """SSLContext takes files only: a private temp dir, removed at once. New handshakes use the new
    certificate, open connections keep theirs."""
    with tempfile.TemporaryDirectory(prefix="draxr-tls.") as tmp:
        crt, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        crt.write_bytes(tls_crt)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(tls_key)
        context.load_cert_chain(crt, key)
