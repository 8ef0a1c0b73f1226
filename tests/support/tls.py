"""A TLS server standing in for a broker, and throwaway certificate authorities made with openssl.

The server records, per connection, either the completed handshake (the client's certificate)
or the TLS error that ended it, and the first bytes the client sent over the encrypted channel.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker import free_port

ACCEPT_POLL_S = 0.2
READ_TIMEOUT_S = 2.0
FIRST_BYTES = 64
CERTIFICATE_DAYS = "1"
RSA_KEY = "rsa:2048"


@dataclass
class TlsListener:
    """A TLS server that requires a client certificate its context trusts."""

    context: ssl.SSLContext
    port: int = field(default_factory=free_port)
    handshakes: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    first_bytes: list[bytes] = field(default_factory=list)
    _server: socket.socket | None = None

    @classmethod
    def serving(cls, certificates: Certificates, trusted_clients: Certificates) -> TlsListener:
        """Presents ``certificates``' server certificate, trusts clients of ``trusted_clients``."""
        context = ssl.create_default_context(
            ssl.Purpose.CLIENT_AUTH, cafile=str(trusted_clients.ca)
        )
        context.load_cert_chain(certificates.server, certificates.server_key)
        context.verify_mode = ssl.CERT_REQUIRED
        return cls(context)

    def start(self) -> TlsListener:
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(ACCEPT_POLL_S)
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def _serve(self) -> None:
        while self._server is not None:
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            try:
                with self.context.wrap_socket(client, server_side=True) as tls:
                    self.handshakes.append(tls.getpeercert() or {})
                    tls.settimeout(READ_TIMEOUT_S)
                    self.first_bytes.append(tls.recv(FIRST_BYTES))
            except ssl.SSLError as exc:
                self.failures.append(str(exc.reason))
            except OSError as exc:
                self.failures.append(type(exc).__name__)


@dataclass(frozen=True)
class Certificates:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def client(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def make_certificates(directory: Path, ca_name: str) -> Certificates:
    """A throwaway CA named ``ca_name``, its server and client certificates, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", RSA_KEY, "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", CERTIFICATE_DAYS, "-subj", f"/CN={ca_name}",
    )  # fmt: skip
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=novikoff-client")):
        openssl(
            "req", "-newkey", RSA_KEY, "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject,
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", CERTIFICATE_DAYS, "-extfile",
            "san.cnf",
        )  # fmt: skip
    return Certificates(directory)
