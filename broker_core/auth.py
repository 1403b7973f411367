"""Application secrets: the one module that makes, hashes and verifies them (control plane and broker).

A secret is `sy_` + 32 random bytes (256 bits, URL-safe base64), shown once and stored only hashed.
With that much entropy nothing is gained by a slow hash (a password's reason for PBKDF2 is a guessable
password), so the stored form is a keyed fast hash, checked in microseconds on every broker connection:

    hmac_sha256$<salt>$<base64 HMAC-SHA256(key=salt, msg=secret)>

`salt` is 16 random bytes (URL-safe base64, never a `$`), one per secret, so equal secrets never give
equal hashes and a table of precomputed hashes is useless.

Hashes made before this scheme (`pbkdf2_sha256$<iterations>$<salt>$<base64>`, 60,000 rounds) cannot be
re-hashed without the secret, which nobody kept. They keep verifying here, at their own cost (tens of
milliseconds: the broker checks them off its event loop and caches successes), until the app's next
rotation replaces them; `is_legacy` tells them apart (docs/security.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

SCHEME = "hmac_sha256"
LEGACY_SCHEME = "pbkdf2_sha256"
SECRET_PREFIX = "sy_"
SECRET_BYTES = 32  # 256 bits
SALT_BYTES = 16
MAX_LEGACY_ROUNDS = 1_000_000  # a stored hash must not make one check cost more than this


def new_secret() -> str:
    """A fresh app secret: 256 random bits, URL-safe, with a prefix that makes leaks greppable."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def hash_secret(secret: str, *, salt: str | None = None) -> str:
    salt = salt or secrets.token_urlsafe(SALT_BYTES)
    digest = hmac.new(salt.encode(), secret.encode(), hashlib.sha256).digest()
    return f"{SCHEME}${salt}${_b64(digest)}"


def is_legacy(encoded: str) -> bool:
    return isinstance(encoded, str) and encoded.startswith(LEGACY_SCHEME + "$")


def is_fast(encoded: str) -> bool:
    """True when verifying against `encoded` costs microseconds (safe to do on the event loop)."""
    return isinstance(encoded, str) and encoded.startswith(SCHEME + "$")


def verify_secret(secret: str, encoded: str) -> bool:
    """Whether `secret` is the one `encoded` was made from. Constant time in the secret; False on any
    malformed or unknown stored form."""
    if not isinstance(secret, str) or not isinstance(encoded, str):
        return False
    if is_fast(encoded):
        try:
            _, salt, expected = encoded.split("$", 2)
        except ValueError:
            return False
        digest = hmac.new(salt.encode(), secret.encode(), hashlib.sha256).digest()
        return hmac.compare_digest(_b64(digest), expected)
    if is_legacy(encoded):
        return _verify_pbkdf2(secret, encoded)
    return False


def _verify_pbkdf2(secret: str, encoded: str) -> bool:
    try:
        _, iterations, salt, expected = encoded.split("$", 3)
        rounds = int(iterations)
    except ValueError:
        return False
    if not 0 < rounds <= MAX_LEGACY_ROUNDS:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), rounds)
    return hmac.compare_digest(_b64(digest), expected)


@dataclass(frozen=True)
class SecretHash:
    """One accepted secret of an app: its hash, and until when it is accepted (None: no end)."""

    hash: str
    expires_at: float | None = None

    def valid_at(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


def verify_any(secret: str, hashes: Iterable[SecretHash], now: float) -> SecretHash | None:
    """The first hash still valid at `now` that `secret` matches, else None."""
    for candidate in hashes:
        if candidate.valid_at(now) and verify_secret(secret, candidate.hash):
            return candidate
    return None


class VerifiedCache:
    """Remembers (app, stored hash, secret) triples that verified, without keeping the secret. Only worth it
    for legacy (PBKDF2) hashes: a fast hash is cheaper to check than to look up."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._ok: dict[tuple[str, str], bytes] = {}

    @staticmethod
    def _fingerprint(secret: str) -> bytes:
        return hashlib.sha256(secret.encode()).digest()

    def hit(self, app_id: str, encoded: str, secret: str) -> bool:
        known = self._ok.get((app_id, encoded))
        return known is not None and hmac.compare_digest(known, self._fingerprint(secret))

    def remember(self, app_id: str, encoded: str, secret: str) -> None:
        if len(self._ok) >= self.max_entries:
            self._ok.clear()
        self._ok[(app_id, encoded)] = self._fingerprint(secret)

    def forget(self, app_id: str) -> None:
        for key in [k for k in self._ok if k[0] == app_id]:
            del self._ok[key]
