"""Bearer tokens: where they come from, how they are stored and how a presented one is checked.

Format (the same in ``$NOVIKOFF_HTTP_TOKENS`` and in ``http.tokens_file``): entries separated by
whitespace or newlines, each ``scope[,scope...]:token``; in the file, a line starting with ``#``
is a comment. Scopes are ``predict``, ``read`` and ``metrics``. A token is 16 to 256 characters
of the RFC 6750 token alphabet (letters, digits, ``-._~+/``, trailing ``=``), e.g. the output of
``openssl rand -base64 32`` or ``python -c 'import secrets; print(secrets.token_urlsafe(32))'``::

    read,predict:3q2-7wEXAMPLEonlyR8x0TmQmZ0b1c2d3e4f5
    metrics:Z0b1c2d3e4f5EXAMPLEonly3q2-7wR8x0TmQm

Both sources are read; the valid set is their union. The file is re-read when its modification
time, size or inode changes (checked at most every ``http.tokens_reload_seconds``), so a token is
added or withdrawn by rewriting the file (a Kubernetes secret volume swaps it atomically); the
environment is read once at start. A file that cannot be read or parsed keeps the previous set
and logs an error naming the line, never its content.

Only SHA-256 digests of the tokens are kept. A presented token is hashed and its digest compared
with :func:`hmac.compare_digest` against **every** known digest, so the time taken depends on
neither which token matched nor how much of a token a guess shares; no token or digest is ever
logged or rendered (``repr`` shows only the count).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from service.settings import TOKENS_ENV_VAR

logger = logging.getLogger(__name__)

Scope = Literal["predict", "read", "metrics"]
SCOPES: tuple[Scope, ...] = ("predict", "read", "metrics")
MIN_TOKEN_LENGTH = 16
MAX_TOKEN_LENGTH = 256
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
"""RFC 6750 ``b64token``: what may follow ``Bearer`` in an Authorization header."""
ENTRY_SEPARATOR = ":"
SCOPE_SEPARATOR = ","
COMMENT = "#"


class TokenConfigError(RuntimeError):
    """Tokens cannot be used; the message says where, never what the token is."""


@dataclass(frozen=True, repr=False)
class TokenEntry:
    """One valid token, kept only as its SHA-256 digest, and its scopes."""

    digest: bytes
    scopes: frozenset[Scope]

    def __repr__(self) -> str:
        return f"TokenEntry(scopes={sorted(self.scopes)})"


def digest(token: str) -> bytes:
    """The SHA-256 digest a token is stored and compared as."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def parse_tokens(text: str, origin: str) -> tuple[TokenEntry, ...]:
    """The entries of ``text`` (see the module docstring for the format).

    Raises
    ------
    TokenConfigError
        Naming ``origin`` and the line of the first bad entry, not the entry itself.
    """
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(COMMENT):
            continue
        for item in line.split():
            entries.append(_entry(item, f"{origin} line {number}"))
    return tuple(entries)


def _entry(item: str, where: str) -> TokenEntry:
    scopes_text, sep, token = item.partition(ENTRY_SEPARATOR)
    if not sep:
        raise TokenConfigError(f"{where}: expected scope[,scope...]:token")
    scopes = {scope.strip() for scope in scopes_text.split(SCOPE_SEPARATOR) if scope.strip()}
    unknown = scopes - set(SCOPES)
    if not scopes or unknown:
        raise TokenConfigError(
            f"{where}: scopes must be among {', '.join(SCOPES)}, before the colon"
        )
    if not MIN_TOKEN_LENGTH <= len(token) <= MAX_TOKEN_LENGTH or not TOKEN_PATTERN.match(token):
        raise TokenConfigError(
            f"{where}: a token is {MIN_TOKEN_LENGTH} to {MAX_TOKEN_LENGTH} characters of "
            "letters, digits and -._~+/ (trailing = allowed)"
        )
    return TokenEntry(digest(token), frozenset(scopes))  # type: ignore[arg-type]


class TokenTable:
    """The tokens valid at one moment (a token listed twice holds the union of its scopes).

    Parameters
    ----------
    entries
        The tokens' digests and scopes.
    """

    def __init__(self, entries: Iterable[TokenEntry] = ()) -> None:
        merged: dict[bytes, frozenset[Scope]] = {}
        for entry in entries:
            merged[entry.digest] = merged.get(entry.digest, frozenset()) | entry.scopes
        self._digests = tuple(merged)
        # Index 0 is "no match"; token i (from 1) answers with _scopes[i].
        self._scopes: tuple[frozenset[Scope] | None, ...] = (None, *merged.values())

    def __repr__(self) -> str:
        return f"TokenTable({len(self)} tokens)"

    def __len__(self) -> int:
        return len(self._digests)

    def scopes_of(self, presented: str) -> frozenset[Scope] | None:
        """The scopes of ``presented``, or None when no token matches.

        Every stored digest is compared and the match's index accumulated without a branch, so
        the time says neither which token matched nor how much of one a guess shares (digests
        are compared, not the tokens). At most one digest can match: they are distinct. A guess
        longer than any token can be is refused without hashing it.
        """
        if len(presented) > MAX_TOKEN_LENGTH:
            return None
        candidate = digest(presented)
        index = 0
        for position, stored in enumerate(self._digests, start=1):
            index |= position * hmac.compare_digest(candidate, stored)
        return self._scopes[index]


def _file_identity(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


@dataclass(repr=False)
class TokenSource:
    """The current :class:`TokenTable`: the environment's tokens plus the file's, kept fresh.

    Parameters
    ----------
    path
        ``http.tokens_file``, or None.
    reload_seconds
        The file's identity is checked at most this often (0: on every request).
    environ
        Where ``$NOVIKOFF_HTTP_TOKENS`` is read from (the process environment by default).
    clock
        Monotonic seconds.
    """

    path: Path | None
    reload_seconds: float
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    clock: Callable[[], float] = time.monotonic
    _env_entries: tuple[TokenEntry, ...] = ()
    _table: TokenTable = field(default_factory=TokenTable)
    _identity: tuple[int, int, int] | None = None
    _checked_at: float = float("-inf")

    def __post_init__(self) -> None:
        self._env_entries = parse_tokens(self.environ.get(TOKENS_ENV_VAR, ""), TOKENS_ENV_VAR)
        file_entries: tuple[TokenEntry, ...] = ()
        if self.path is not None:
            try:
                self._identity = _file_identity(self.path)
                file_entries = parse_tokens(self.path.read_text(encoding="utf-8"), str(self.path))
            except (OSError, UnicodeDecodeError) as exc:
                raise TokenConfigError(f"http.tokens_file {self.path}: {exc}") from None
        self._table = TokenTable(self._env_entries + file_entries)
        self._checked_at = self.clock()
        if not len(self._table):
            raise TokenConfigError(
                f'http.auth = "token" needs at least one token in ${TOKENS_ENV_VAR} or '
                "http.tokens_file (format: scope[,scope...]:token)"
            )

    def __repr__(self) -> str:
        return f"TokenSource(path={self.path}, {len(self._table)} tokens)"

    @property
    def table(self) -> TokenTable:
        """The tokens valid now (re-reading the file if it changed)."""
        if self.path is not None:
            now = self.clock()
            if now - self._checked_at >= self.reload_seconds:
                self._checked_at = now
                self._reload(self.path)
        return self._table

    def _reload(self, path: Path) -> None:
        try:
            identity = _file_identity(path)
            if identity == self._identity:
                return
            entries = parse_tokens(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, TokenConfigError) as exc:
            logger.error("keeping the previous tokens: cannot reload %s: %s", path, _safe(exc))
            return
        self._identity = identity
        self._table = TokenTable(self._env_entries + entries)
        logger.info("reloaded %s: %d tokens valid", path, len(self._table))


def _safe(exc: BaseException) -> str:
    """An error's message with nothing of the file's content (UnicodeDecodeError quotes bytes)."""
    return type(exc).__name__ if isinstance(exc, UnicodeDecodeError) else str(exc)
