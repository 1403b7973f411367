"""Application secret hashes (broker_core.auth, docs/security.md): the one scheme of the control plane and the
brokers, the PBKDF2 hashes made before it, and the accepted-secrets list with deadlines; and on a real broker,
a rotation's overlap and a legacy hash."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from broker_core import protocol as p
from broker_core.auth import (
    SecretHash,
    VerifiedCache,
    hash_secret,
    is_fast,
    new_secret,
    verify_any,
    verify_secret,
)
from broker_core.client import AuthError, Producer
from tests.broker.conftest import wait_for


def pbkdf2_hash(secret: str, salt: str = "0123456789abcdef01234567", iterations: int = 60_000) -> str:
    """The hashes the control plane made before the HMAC scheme (Django's PBKDF2 format)."""
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt.encode(), iterations)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"


def test_new_secrets_carry_256_random_bits():
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("sy_") and len(base64.urlsafe_b64decode(secret[3:] + "=")) == 32


def test_hmac_hashes_round_trip_with_a_salt_of_their_own():
    encoded = hash_secret("sy_s3cret")
    scheme, salt, digest = encoded.split("$")
    expected = base64.b64encode(hmac.new(salt.encode(), b"sy_s3cret", hashlib.sha256).digest()).decode()
    assert (scheme, digest) == ("hmac_sha256", expected) and is_fast(encoded)
    assert verify_secret("sy_s3cret", encoded) and not verify_secret("sy_s3creT", encoded)
    assert hash_secret("sy_s3cret") != encoded, "a fresh salt per hash"


def test_legacy_pbkdf2_hashes_still_verify_with_their_own_iterations():
    assert verify_secret("s3cret", pbkdf2_hash("s3cret"))
    assert verify_secret("s3cret", pbkdf2_hash("s3cret", iterations=1000))
    assert not verify_secret("wrong", pbkdf2_hash("s3cret"))
    assert not is_fast(pbkdf2_hash("s3cret"))


def test_malformed_hashes_never_verify():
    for bad in ("", "plain", "md5$1$salt$x", "pbkdf2_sha256$notanumber$s$x", "pbkdf2_sha256$0$s$x",
                "pbkdf2_sha256$99999999999$s$x", "hmac_sha256$only-salt", "hmac_sha256$$", None):
        assert not verify_secret("s3cret", bad)


def test_an_accepted_secret_stops_at_its_deadline():
    old, new = SecretHash(hash_secret("old"), expires_at=1000.0), SecretHash(hash_secret("new"))
    assert verify_any("old", [new, old], now=999.9) == old
    assert verify_any("old", [new, old], now=1000.0) is None
    assert verify_any("new", [new, old], now=10**10) == new
    assert verify_any("wrong", [new, old], now=0) is None


def test_the_cache_is_keyed_by_the_stored_hash():
    cache = VerifiedCache()
    old, new = pbkdf2_hash("s3cret", salt="a" * 24), pbkdf2_hash("rotated", salt="b" * 24)
    cache.remember("app", old, "s3cret")
    assert cache.hit("app", old, "s3cret")
    assert not cache.hit("app", old, "wrong")
    assert not cache.hit("app", new, "s3cret"), "a rotated hash is verified afresh"
    cache.forget("app")
    assert not cache.hit("app", old, "s3cret")


def refusal(cluster, broker, secret: str) -> str | None:
    """The broker's auth_failed message for this secret on a fresh connection, or None when accepted."""
    try:
        with Producer(app_id="app-orders", secret=secret, brokers=[broker.address], send_timeout=5) as producer:
            producer.send("orders", b"hello")
    except AuthError as err:
        assert err.code == p.E_AUTH_FAILED
        return err.message
    return None


def test_a_rotation_overlap_on_a_real_broker(cluster):
    cluster.standard("orders", secret="sy_old")
    broker = cluster.broker()
    assert refusal(cluster, broker, "sy_old") is None
    deadline = time.time() + 6
    cluster.pv.app("app-orders", "sy_new", old_secret="sy_old", old_valid_for_s=6, revision=2)
    wait_for(lambda: refusal(cluster, broker, "sy_new") is None, 10, "the broker to accept the new secret")
    assert time.time() < deadline, "the checks below need the overlap still running"
    assert refusal(cluster, broker, "sy_old") is None, "the old secret works until its deadline"
    assert refusal(cluster, broker, "sy_wrong") == "wrong secret for app 'app-orders'"
    message = wait_for(lambda: refusal(cluster, broker, "sy_old"), 20, "the old secret to be refused")
    assert message == "wrong secret for app 'app-orders'" and time.time() >= deadline
    assert refusal(cluster, broker, "sy_new") is None


def test_a_legacy_pbkdf2_hash_keeps_working_on_a_real_broker_until_rotated(cluster):
    cluster.standard("orders")
    cluster.pv.app("app-orders", "unused", secret_hash=pbkdf2_hash("sy_legacy"))
    broker = cluster.broker()
    assert refusal(cluster, broker, "sy_legacy") is None
    assert refusal(cluster, broker, "sy_wrong") == "wrong secret for app 'app-orders'"
    cluster.pv.app("app-orders", "sy_rotated", revision=2)  # the next rotation: an HMAC hash, no overlap
    wait_for(lambda: refusal(cluster, broker, "sy_rotated") is None, 10, "the rotation to reach the broker")
    assert refusal(cluster, broker, "sy_legacy") == "wrong secret for app 'app-orders'"
