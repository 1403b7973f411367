"""LDAP login and the periodic LDAP sync (django-auth-ldap; settings in control_plane.sso_settings).

A login searches the user with the service account, binds as the user with the password given, reads the
user's groups, and hands all of it to sso_actions.sign_in, which makes or updates the Switchyard user and its
roles and teams. The sync does the same for every LDAP user Switchyard knows, without a password; a user the
search no longer finds (deleted, or disabled and so outside SWITCHYARD_LDAP_USER_FILTER) is deactivated and
loses its API tokens.
"""

from __future__ import annotations

import logging

import ldap
from django.conf import settings
from django.contrib.auth.models import User
from django_auth_ldap.backend import LDAPBackend, ldap_error

from apps.accounts import sso_actions
from apps.accounts.models import LDAP, ExternalIdentity

log = logging.getLogger(__name__)

# errors that say the directory is away, not that a user is missing: the sync stops and retries later
UNREACHABLE = (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR, ldap.INVALID_CREDENTIALS)


class DirectoryUnreachable(RuntimeError):
    """The sync could not ask the directory; nobody was deactivated."""


def _first(attrs, name: str) -> str:
    values = (attrs or {}).get(name) or []
    return str(values[0]) if values else ""


def directory_person(username: str, ldap_user) -> sso_actions.DirectoryUser:
    attrs = ldap_user.attrs
    names = settings.SWITCHYARD_LDAP_ATTRS
    groups = {*ldap_user.group_names, *ldap_user.group_dns}
    return sso_actions.DirectoryUser(source=LDAP, subject=username, username=username,
                                     email=_first(attrs, names["email"]), first_name=_first(attrs, names["first_name"]),
                                     last_name=_first(attrs, names["last_name"]), groups=tuple(sorted(groups)))


class DirectoryBackend(LDAPBackend):
    """django-auth-ldap's backend, with Switchyard's user handling: users are made and mapped by the actions
    layer, a username a local account holds is refused, and an inactive user's session ends."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not settings.AUTH_LDAP_SERVER_URI:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        return User.objects.filter(pk=user_id, is_active=True).first()

    def get_all_permissions(self, user, obj=None):
        return set()  # permissions come from roles (LocalPasswordBackend answers them)

    def ldap_to_django_username(self, username):
        return username.lower()

    def get_or_build_user(self, username, ldap_user):
        try:
            return sso_actions.sign_in(person=directory_person(username, ldap_user)), False
        except sso_actions.SsoRefused as refused:
            log.warning("LDAP login refused", extra={"username": username, "reason": refused.message})
            raise ldap_user.AuthenticationFailed(refused.message) from refused


def sync_directory(progress=None) -> dict:
    """Every LDAP user Switchyard knows, read again from the directory: groups remapped, users it no longer
    finds deactivated. Raises DirectoryUnreachable (changing nothing more) when the directory does not answer."""
    if not settings.AUTH_LDAP_SERVER_URI:
        return {"skipped": "LDAP is not configured (SWITCHYARD_LDAP_SERVER_URI)"}
    backend = DirectoryBackend()
    errors: list[Exception] = []

    def collect(sender, context=None, exception=None, **kwargs):
        errors.append(exception)

    ldap_error.connect(collect, sender=DirectoryBackend, weak=False)
    counts = {"synced": 0, "deactivated": 0, "failed": 0}
    identities = list(ExternalIdentity.objects.filter(source=LDAP).select_related("user").order_by("pk"))
    try:
        for done, identity in enumerate(identities, 1):
            errors.clear()
            user = backend.populate_user(identity.subject)
            if errors:
                if isinstance(errors[0], UNREACHABLE):
                    raise DirectoryUnreachable(f"the LDAP server did not answer ({errors[0]!r}); "
                                               f"{done - 1} of {len(identities)} users synced, nobody deactivated")
                counts["failed"] += 1
                log.warning("LDAP sync of a user failed", extra={"username": identity.subject,
                                                                 "error": repr(errors[0])})
            elif user is None:
                changed = sso_actions.deactivate(identity=identity, reason="the LDAP user search no longer finds "
                                                                           "the user (deleted or disabled)")
                counts["deactivated"] += int(changed)
            else:
                counts["synced"] += 1
            if progress:
                progress(done, len(identities))
            elif done % 200 == 0:
                log.info("LDAP sync progress", extra={**counts, "done": done, "users": len(identities)})
    finally:
        ldap_error.disconnect(collect, sender=DirectoryBackend)
    log.info("LDAP sync done", extra={**counts, "users": len(identities)})
    return counts
