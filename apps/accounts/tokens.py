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
    active user (expired tokens are deleted when seen). A revoked token no longer exists."""

    def validate_user(self, auth_token: ApiToken):
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USE_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return user, token
