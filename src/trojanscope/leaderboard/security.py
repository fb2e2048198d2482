"""Tokens: team tokens are generated here, shown once and stored only as scrypt hashes.

A team token reads ``ts_<team id>_<secret>``: the id picks the one row whose hash is checked, so a
request costs one scrypt, not one per team. The organiser token comes from settings and is
compared through SHA-256 digests with :func:`hmac.compare_digest` (constant time).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
_TOKEN_RE = re.compile(r"^ts_(\d{1,12})_([A-Za-z0-9_-]{20,100})$")


def new_team_token(team_id: int) -> str:
    """A fresh token for ``team_id`` (256 random bits)."""
    return f"ts_{team_id}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    """``scrypt$n$r$p$salt$hash`` with a random 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(token.encode(), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}${salt.hex()}${digest.hex()}"


def verify_token(token: str, stored: str) -> bool:
    """Whether ``token`` matches the stored scrypt hash (constant-time compare)."""
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(token.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=32)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)


def team_id_from_token(token: str) -> int | None:
    """The team id a well-formed token names, or ``None`` for anything else."""
    m = _TOKEN_RE.match(token or "")
    return int(m.group(1)) if m else None


def admin_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time organiser-token check; no configured token means no organiser access at all."""
    if not given or not expected:
        return False
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest())


ORGANISER_COOKIE = "trojanscope_organiser"


def organiser_cookie(admin_token: str) -> str:
    """The value of the organiser's sign-in cookie: a digest of the token, never the token. It lets a browser
    *read* what organisers may read (test and holdout reports, reasons, hidden scores); every organiser action
    still needs the token itself as a bearer header."""
    return hashlib.sha256(f"trojanscope organiser page cookie\0{admin_token}".encode()).hexdigest()


def cookie_matches(given: str | None, admin_token: str | None) -> bool:
    if not given or not admin_token:
        return False
    return hmac.compare_digest(given.encode(), organiser_cookie(admin_token).encode())
