"""The serving port's TLS certificate, key and client CA, reloaded without a restart: on SIGHUP and when a file changes
(a renewed Kubernetes Secret, cert-manager). Connections already open keep the certificate they started with, so no
call is dropped; a rewrite that does not load keeps the last good certificate."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path
from typing import Callable

import grpc

from service.config import ConfigError, SecurityConfig

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0  # a new connection's handshake looks at the files' mtime and size at most this often


def read_pem(path: str, key: str) -> bytes:
    """A PEM file named by `security.<key>`; ConfigError says which entry and why."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"security.{key}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"security.{key}: {path} is not a PEM file")
    return data


class ServerCertificates:
    """TLS material of the serving port as dynamic gRPC credentials: gRPC asks `_fetch` at every new handshake, which
    hands over a reloaded certificate once (`reload()` on SIGHUP, or a changed file seen by the handshake itself)."""

    def __init__(self, sec: SecurityConfig, *, clock: Callable[[], float] = time.monotonic,
                 check_every_s: float = CHECK_EVERY_S):
        self._sec = sec
        self._clock = clock
        self._check_every_s = check_every_s
        self._lock = threading.Lock()  # _fetch runs on gRPC's threads, reload() on the event loop
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self._last_check_s = clock()
        self._stamps = self._file_stamps()
        self._initial = self._load()  # ConfigError at start: the server does not start without its certificate
        self.reloads = 0  # certificates handed to gRPC after the first

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self._initial, self._fetch,
                                                   require_client_authentication=bool(self._sec.tls_client_ca_file))

    def _paths(self) -> list[str]:
        return [p for p in (self._sec.tls_cert_file, self._sec.tls_key_file, self._sec.tls_client_ca_file) if p]

    def _file_stamps(self) -> tuple:
        out = []
        for path in self._paths():
            try:
                st = os.stat(path)  # follows the symlinks a Secret volume swaps
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _load(self) -> grpc.ServerCertificateConfiguration:
        """Read and check the files: the key must match the certificate (ssl loads them as a pair)."""
        sec = self._sec
        chain = read_pem(sec.tls_cert_file, "tls_cert_file")
        key = read_pem(sec.tls_key_file, "tls_key_file")
        client_ca = read_pem(sec.tls_client_ca_file, "tls_client_ca_file") if sec.tls_client_ca_file else None
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(sec.tls_cert_file, sec.tls_key_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"security.tls_cert_file/tls_key_file: the key does not load with the certificate "
                              f"({exc})") from None
        if read_pem(sec.tls_cert_file, "tls_cert_file") != chain or read_pem(sec.tls_key_file, "tls_key_file") != key:
            raise ConfigError("security.tls_cert_file/tls_key_file changed while being read; will try again")
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=client_ca)

    def reload(self, why: str = "SIGHUP") -> bool:
        """Read the files again; the next handshakes use them. False (and the old certificate stays) if they do not
        load."""
        stamps = self._file_stamps()
        try:
            config = self._load()
        except ConfigError as exc:
            with self._lock:
                self._stamps = stamps  # do not retry the same broken files at every handshake
            log.error("%s: TLS certificate not reloaded, the previous one stays in use: %s", why, exc)
            return False
        with self._lock:
            self._pending = config
            self._stamps = stamps
        log.info("%s: TLS certificate reloaded from %s; new connections use it", why, self._sec.tls_cert_file)
        return True

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's hook at each new handshake: the reloaded configuration once, else None (no change)."""
        try:
            now = self._clock()
            if now - self._last_check_s >= self._check_every_s:
                self._last_check_s = now
                if self._file_stamps() != self._stamps:
                    self.reload("certificate files changed")
            with self._lock:
                config, self._pending = self._pending, None
            if config is not None:
                self.reloads += 1
            return config
        except Exception:  # noqa: BLE001 - a failure here must never break the handshake of a caller
            log.exception("TLS certificate check failed; the current certificate stays in use")
            return None
