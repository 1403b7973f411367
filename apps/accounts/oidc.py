"""OpenID Connect login (mozilla-django-oidc; settings in control_plane.sso_settings): the authorization code
flow with PKCE, users matched by the `sub` claim and made and mapped by the actions layer, the session checked
with the provider again every SWITCHYARD_OIDC_RECHECK_SECONDS, and RP-initiated logout."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from django.shortcuts import resolve_url
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from apps.accounts import sso_actions
from apps.accounts.models import OIDC

log = logging.getLogger(__name__)


def enabled() -> bool:
    return settings.SWITCHYARD_OIDC_ENABLED


def _groups(claims: dict) -> tuple[str, ...]:
    value = claims.get(settings.SWITCHYARD_OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        value = value.split()
    return tuple(sorted({str(g) for g in value if str(g).strip()}))


class OidcBackend(OIDCAuthenticationBackend):
    """The provider's verified ID token (issuer, audience, signature, expiry, nonce) and userinfo name the
    person; sso_actions.sign_in makes or updates the user and applies the group mapping."""

    def __init__(self, *args, **kwargs):
        if enabled():
            super().__init__(*args, **kwargs)
        else:
            self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        """None (the login fails, with the reason in the log) for a token that fails a check or a provider that
        does not answer; never an error page."""
        if not enabled():
            return None
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as refused:
            log.warning("OIDC login refused", extra={"reason": str(refused)})
        except requests.RequestException as error:
            log.error("OIDC provider unreachable", extra={"error": str(error)})
            messages.error(request, "The identity provider did not answer: try again in a moment.")
        return None

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        issuer = settings.SWITCHYARD_OIDC_ISSUER
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation(f"ID token issued by {payload.get('iss')!r}, not by {issuer!r}")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token not meant for this client (aud)")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims completed by userinfo: some providers (Entra ID) put groups in the token only."""
        info = super().get_userinfo(access_token, id_token, payload)
        if info.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo names another subject than the ID token")
        return {**payload, **info}

    def verify_claims(self, claims):
        return bool(claims.get("sub")) and bool(claims.get(settings.SWITCHYARD_OIDC_USERNAME_CLAIM))

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(external_identity__source=OIDC,
                                             external_identity__subject=str(claims["sub"]))

    def create_user(self, claims):
        return self._sign_in(claims)

    def update_user(self, user, claims):
        return self._sign_in(claims)

    def _sign_in(self, claims):
        person = sso_actions.DirectoryUser(
            source=OIDC, subject=str(claims["sub"]), username=str(claims[settings.SWITCHYARD_OIDC_USERNAME_CLAIM]),
            email=claims.get("email") or "", first_name=claims.get("given_name") or "",
            last_name=claims.get("family_name") or "", groups=_groups(claims))
        try:
            return sso_actions.sign_in(person=person)
        except sso_actions.SsoRefused as refused:
            log.warning("OIDC login refused", extra={"username": person.username, "reason": refused.message})
            messages.error(self.request, refused.message)
            raise SuspiciousOperation(refused.message) from refused


class _OnlyWhenEnabled:
    def dispatch(self, request, *args, **kwargs):
        if not enabled():
            raise Http404("OIDC login is not configured")
        return super().dispatch(request, *args, **kwargs)


class OidcLoginView(_OnlyWhenEnabled, OIDCAuthenticationRequestView):
    """Anyone: redirects to the provider's authorization endpoint (state, nonce, PKCE S256 challenge)."""


class OidcCallbackView(_OnlyWhenEnabled, OIDCAuthenticationCallbackView):
    """Anyone: the provider's answer; the code is exchanged (with the PKCE verifier) for tokens."""

    def login_failure(self):
        log.info("OIDC login failed", extra={"error": self.request.GET.get("error", "")})
        return super().login_failure()


class LogoutView(OIDCLogoutView):
    """POST: ends the Switchyard session; a session that came from OIDC also ends at the provider
    (RP-initiated logout) when it names an end-session endpoint."""


def provider_logout_url(request) -> str:
    """Where logout goes: the provider's end-session endpoint for an OIDC session, else the login page."""
    login = resolve_url(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    endpoint = settings.SWITCHYARD_OIDC_END_SESSION_ENDPOINT
    if not (enabled() and endpoint and id_token):
        return login
    query = urlencode({"id_token_hint": id_token, "client_id": settings.OIDC_RP_CLIENT_ID,
                       "post_logout_redirect_uri": request.build_absolute_uri(login)})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


class SessionRecheck(SessionRefresh):
    """mozilla-django-oidc's session refresh, when OIDC is on: once the last check is older than
    SWITCHYARD_OIDC_RECHECK_SECONDS, a page load goes to the provider silently (prompt=none) and back; a user
    the provider no longer logs in is logged out, changed groups are mapped again."""

    def process_request(self, request):
        if not enabled():
            return None
        return super().process_request(request)
