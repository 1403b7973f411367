"""App secrets: generated once, shown once, stored only as a PBKDF2-SHA256 hash.

The stored form is `pbkdf2_sha256$<iterations>$<salt>$<base64 sha256>`, the one that goes into
ZooKeeper /apps/<app-id> as `secret_hash`; a broker checks it with the standard library alone:

    algorithm, iterations, salt, expected = stored.split("$", 3)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), int(iterations))
    ok = hmac.compare_digest(base64.b64encode(digest).decode(), expected)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

ALGORITHM = "pbkdf2_sha256"
ITERATIONS = 60_000
SECRET_PREFIX = "sy_"


def new_secret() -> str:
    """A fresh app secret: 32 random bytes, URL-safe, with a prefix that makes leaks greppable."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str, *, iterations: int = ITERATIONS, salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(12)  # hex: never contains '$'
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), iterations)
    return f"{ALGORITHM}${iterations}${salt}${base64.b64encode(digest).decode('ascii')}"


def verify_secret(secret: str, stored: str) -> bool:
    try:
        algorithm, iterations, salt, expected = stored.split("$", 3)
        rounds = int(iterations)
    except (AttributeError, ValueError):
        return False
    if algorithm != ALGORITHM or rounds <= 0:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), rounds)
    return hmac.compare_digest(base64.b64encode(digest).decode("ascii"), expected)
