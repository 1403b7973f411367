"""API tokens for tests: the real kind (hashed, expiring), made directly for speed (no audit record)."""

from __future__ import annotations

from datetime import timedelta


def token_for(user, days: int = 1) -> str:
    """A fresh API token secret for `user`, valid for `days`."""
    from apps.accounts.models import ApiToken

    _, secret = ApiToken.objects.create(user=user, expiry=timedelta(days=days), name="test")
    return secret
