"""API token authentication: django-rest-knox's digest check on our ApiToken, noting each token's last use."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from knox.auth import TokenAuthentication

from apps.accounts.models import ApiToken

# A token's last use is written at most this often (a busy script must not turn every call into a write).
LAST_USE_RESOLUTION = timedelta(seconds=60)


class ApiTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <secret>`: the secret's SHA-512 digest must match a stored, unexpired token of an
    active user. A revoked token no longer exists; an expired one is refused, and the hourly sweep deletes it
    with an audit record (token_actions.delete_expired_tokens)."""

    def _cleanup_token(self, auth_token: ApiToken) -> bool:
        # knox lists all the user's tokens on every call and deletes the expired ones, unaudited. Here only the
        # presented token's expiry is read (one query less on every API call); True refuses it.
        return auth_token.expiry is not None and auth_token.expiry < timezone.now()

    def validate_user(self, auth_token: ApiToken):
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USE_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return user, token
