"""Secret hashes as the control plane writes them (docs/zookeeper-layout.md, "Secret hashes")."""

from __future__ import annotations

import base64
import hashlib

from broker_core.auth import VerifiedCache, hash_secret, verify_secret


def control_plane_hash(secret: str, salt: str = "0123456789abcdef01234567", iterations: int = 60_000) -> str:
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), iterations)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"


def test_verifies_the_control_planes_format_and_takes_the_iterations_from_the_string():
    assert verify_secret("s3cret", control_plane_hash("s3cret"))
    assert verify_secret("s3cret", control_plane_hash("s3cret", iterations=1000))
    assert not verify_secret("wrong", control_plane_hash("s3cret"))


def test_malformed_hashes_never_verify():
    for bad in ("", "plain", "md5$1$salt$x", "pbkdf2_sha256$notanumber$s$x", "pbkdf2_sha256$0$s$x",
                "pbkdf2_sha256$99999999999$s$x"):
        assert not verify_secret("s3cret", bad)


def test_own_hashes_round_trip():
    encoded = hash_secret("s3cret", iterations=1000)
    assert encoded.startswith("pbkdf2_sha256$1000$") and verify_secret("s3cret", encoded)


def test_the_cache_is_keyed_by_the_stored_hash():
    cache = VerifiedCache()
    old, new = control_plane_hash("s3cret", salt="a" * 24), control_plane_hash("rotated", salt="b" * 24)
    cache.remember("app", old, "s3cret")
    assert cache.hit("app", old, "s3cret")
    assert not cache.hit("app", old, "wrong")
    assert not cache.hit("app", new, "s3cret"), "a rotated hash is verified afresh"
    cache.forget("app")
    assert not cache.hit("app", old, "s3cret")
