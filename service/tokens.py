"""Bearer tokens: parsed from the environment and a rotating file, kept as digests, looked up in constant time."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from pathlib import Path

from service.config import ConfigError

log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16
_TENANT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def parse_tokens(text: str, source: str) -> list[tuple[str, str]]:
    """`TENANT=TOKEN` entries separated by newlines or commas ('#' starts a comment line) → [(tenant, token)].

    Error messages name the source, the entry number and the tenant, never the token.
    """
    out: list[tuple[str, str]] = []
    entries = [e.strip() for line in text.splitlines() if not line.lstrip().startswith("#") for e in line.split(",")]
    for n, entry in enumerate((e for e in entries if e), start=1):
        tenant, sep, token = entry.partition("=")
        tenant, token = tenant.strip(), token.strip()
        if not sep or not token:
            raise ConfigError(f"{source}: entry {n} is not TENANT=TOKEN")
        if not _TENANT_NAME.match(tenant):
            raise ConfigError(f"{source}: entry {n}: tenant name must be 1-64 of A-Z a-z 0-9 _ . -")
        if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token) or not token.isascii():
            raise ConfigError(
                f"{source}: entry {n} (tenant {tenant}): a token needs at least {MIN_TOKEN_CHARS} ASCII characters "
                "and no spaces"
            )
        out.append((tenant, token))
    return out


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenStore:
    """Bearer tokens → tenant. Keeps SHA-256 digests only; a lookup compares against every entry in constant time.

    Tokens come from an environment variable (read once) and a file (re-read when its mtime or size
    changes, checked at most every `check_interval_s`: rotate by rewriting the mounted Secret).
    """

    def __init__(self, file: str = "", env_var: str = "", environ: Mapping[str, str] | None = None,
                 check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        environ = os.environ if environ is None else environ
        env = parse_tokens(environ.get(env_var, ""), f"${env_var}") if env_var else []
        self._env = [(tenant, _digest(token)) for tenant, token in env]  # digests only, even for reloads
        self._file = Path(file) if file else None
        self._file_sig: tuple[int, int] | None = None
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._next_check_s = 0.0
        self._digests: list[tuple[bytes, str]] = []
        self._load(strict=True)

    def _load(self, strict: bool) -> None:
        entries = list(self._env)
        if self._file is not None:
            try:
                st = self._file.stat()
                sig = (st.st_mtime_ns, st.st_size)
                if sig == self._file_sig and not strict:
                    return
                text = self._file.read_text(encoding="utf-8")
                entries += [(t, _digest(k)) for t, k in parse_tokens(text, f"security.tokens_file {self._file}")]
            except (OSError, UnicodeDecodeError, ConfigError) as exc:
                if strict:
                    raise ConfigError(f"security.tokens_file: cannot load {self._file}: {exc}") from None
                log.warning("token file %s could not be reloaded (%s); keeping the previous tokens",
                            self._file, type(exc).__name__)
                return
            self._file_sig = sig
        digests: dict[bytes, str] = {}
        for tenant, d in entries:
            if digests.get(d, tenant) != tenant:
                raise ConfigError(f"the same token is given to tenants {digests[d]} and {tenant}")
            digests[d] = tenant
        self._digests = list(digests.items())
        if not strict:
            log.info("token file reloaded: %d token(s) for %d tenant(s)", len(self), len(self.tenants))

    def _maybe_reload(self) -> None:
        if self._file is None:
            return
        now = self._clock()
        if now < self._next_check_s:
            return
        self._next_check_s = now + self._check_interval_s
        self._load(strict=False)

    def tenant_for(self, token: str) -> str | None:
        """The tenant this token belongs to, or None."""
        self._maybe_reload()
        presented = _digest(token)
        found: str | None = None
        for known, tenant in self._digests:  # no early exit: the time does not depend on which entry matches
            if hmac.compare_digest(presented, known) and found is None:
                found = tenant
        return found

    @property
    def tenants(self) -> set[str]:
        """Tenant names that hold at least one token."""
        return {t for _, t in self._digests}

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:  # never the tokens or their digests
        return f"TokenStore({len(self)} tokens, {len(self.tenants)} tenants)"


