"""App credentials: the PBKDF2-SHA256 secret hashes the control plane provisions under /apps/<app-id>.

Format: `pbkdf2_sha256$<iterations>$<salt>$<base64 sha256>` (the same as Django's PBKDF2 hasher),
checked with hashlib alone. A PBKDF2 check is slow on purpose (tens of milliseconds), so the broker
runs it off the event loop and caches successful checks, keyed by the stored hash: a rotated secret
is verified afresh.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

ALGORITHM = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000


def hash_secret(secret: str, *, iterations: int = DEFAULT_ITERATIONS, salt: str | None = None) -> str:
    salt = salt or secrets.token_urlsafe(16).replace("$", "_")
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), iterations)
    return f"{ALGORITHM}${iterations}${salt}${base64.b64encode(digest).decode('ascii')}"


def verify_secret(secret: str, encoded: str) -> bool:
    try:
        algorithm, iterations, salt, expected = encoded.split("$", 3)
        rounds = int(iterations)
    except (AttributeError, ValueError):
        return False
    if algorithm != ALGORITHM or not 0 < rounds <= 10_000_000:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), rounds)
    return hmac.compare_digest(base64.b64encode(digest).decode("ascii"), expected)


class VerifiedCache:
    """Remembers (app, stored hash, secret) triples that verified, without keeping the secret."""

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
