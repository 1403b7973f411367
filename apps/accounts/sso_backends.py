"""The local password backend: Django's ModelBackend, refused when local login is switched off.

It stays in AUTHENTICATION_BACKENDS either way: it answers every permission check (roles are groups)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


def password_login_enabled() -> bool:
    """Whether the login form (and POST /api/v1/auth/token/) takes a username and password at all."""
    return settings.SWITCHYARD_LOCAL_LOGIN or bool(settings.AUTH_LDAP_SERVER_URI)


class LocalPasswordBackend(ModelBackend):
    """Local accounts' passwords (SWITCHYARD_LOCAL_LOGIN=1, the default). SSO users have no usable password."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not settings.SWITCHYARD_LOCAL_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
