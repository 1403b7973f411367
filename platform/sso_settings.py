"""Single sign-on settings from the environment (docs/sso.md): OIDC through mozilla-django-oidc, LDAP through
django-auth-ldap. settings.py applies what `oidc_settings` and `ldap_settings` return; secrets come from a
variable or from the mode-600 file its `_FILE` variable names (never a command line)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import ldap
from django.core.exceptions import ImproperlyConfigured
from django_auth_ldap import config as ldap_config

from broker_core.secret_source import read_secret

OIDC_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "SWITCHYARD_OIDC_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT": "SWITCHYARD_OIDC_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT": "SWITCHYARD_OIDC_USERINFO_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT": "SWITCHYARD_OIDC_JWKS_ENDPOINT",
}

LDAP_GROUP_TYPES = {
    "groupOfNames": (ldap_config.GroupOfNamesType, "(objectClass=groupOfNames)"),
    "nestedGroupOfNames": (ldap_config.NestedGroupOfNamesType, "(objectClass=groupOfNames)"),
    "groupOfUniqueNames": (ldap_config.GroupOfUniqueNamesType, "(objectClass=groupOfUniqueNames)"),
    "posixGroup": (ldap_config.PosixGroupType, "(objectClass=posixGroup)"),
    "activeDirectory": (ldap_config.ActiveDirectoryGroupType, "(objectClass=group)"),
    "nestedActiveDirectory": (ldap_config.NestedActiveDirectoryGroupType, "(objectClass=group)"),
}


def _flag(env: Mapping[str, str], name: str, default: str) -> bool:
    value = env.get(name, default).strip().lower()
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise ImproperlyConfigured(f"{name}={value!r}: use 1 or 0")
    return value in ("1", "true", "yes")


def oidc_settings(env: Mapping[str, str]) -> dict:
    """OIDC login (authorization code flow with PKCE) is on when SWITCHYARD_OIDC_CLIENT_ID is set."""
    client_id = env.get("SWITCHYARD_OIDC_CLIENT_ID", "")
    out = {
        "SWITCHYARD_OIDC_ENABLED": bool(client_id),
        "SWITCHYARD_OIDC_ISSUER": env.get("SWITCHYARD_OIDC_ISSUER", ""),
        "SWITCHYARD_OIDC_LABEL": env.get("SWITCHYARD_OIDC_LABEL", "single sign-on"),
        "SWITCHYARD_OIDC_USERNAME_CLAIM": env.get("SWITCHYARD_OIDC_USERNAME_CLAIM", "preferred_username"),
        "SWITCHYARD_OIDC_GROUPS_CLAIM": env.get("SWITCHYARD_OIDC_GROUPS_CLAIM", "groups"),
        "SWITCHYARD_OIDC_END_SESSION_ENDPOINT": env.get("SWITCHYARD_OIDC_END_SESSION_ENDPOINT", ""),
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": "",
        "OIDC_RP_SIGN_ALGO": env.get("SWITCHYARD_OIDC_SIGN_ALGO", "RS256"),
        "OIDC_RP_SCOPES": env.get("SWITCHYARD_OIDC_SCOPES", "openid email profile"),
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_STORE_ID_TOKEN": True,  # the id_token_hint of RP-initiated logout
        "OIDC_TIMEOUT": float(env.get("SWITCHYARD_OIDC_TIMEOUT", "10")),
        # an OIDC session is checked again with the provider (silently) this often: a user disabled there, or
        # whose groups changed, is logged out or remapped then
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": int(env.get("SWITCHYARD_OIDC_RECHECK_SECONDS", "900")),
        "OIDC_EXEMPT_URLS": [re.compile(r"^/api/"), re.compile(r"^/static/"), "logout"],
        "OIDC_OP_LOGOUT_URL_METHOD": "apps.accounts.oidc.provider_logout_url",
        "OIDC_VERIFY_SSL": env.get("SWITCHYARD_OIDC_CA_FILE") or True,
        "LOGIN_REDIRECT_URL_FAILURE": "/login/?sso=failed",
        **{setting: env.get(variable, "") for setting, variable in OIDC_ENDPOINTS.items()},
    }
    if not client_id:
        return out
    missing = [v for v in ("SWITCHYARD_OIDC_ISSUER", *OIDC_ENDPOINTS.values()) if not env.get(v)]
    if missing:
        raise ImproperlyConfigured(
            f"OIDC login is on (SWITCHYARD_OIDC_CLIENT_ID is set) but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not: `manage.py oidc_discover ISSUER_URL` prints every "
            "endpoint variable from the provider's discovery document (docs/sso.md)")
    secret = read_secret("SWITCHYARD_OIDC_CLIENT_SECRET", env)
    if not secret:
        raise ImproperlyConfigured(
            "OIDC login is on but has no client secret: put it in a mode-600 file and name the file in "
            "SWITCHYARD_OIDC_CLIENT_SECRET_FILE")
    out["OIDC_RP_CLIENT_SECRET"] = secret
    return out


def ldap_settings(env: Mapping[str, str]) -> dict:
    """LDAP login (bind as the user after a search with the service account) is on when
    SWITCHYARD_LDAP_SERVER_URI is set."""
    uri = env.get("SWITCHYARD_LDAP_SERVER_URI", "")
    out = {"SWITCHYARD_LDAP_ENABLED": bool(uri), "AUTH_LDAP_SERVER_URI": uri}
    if not uri:
        return out
    user_base = env.get("SWITCHYARD_LDAP_USER_SEARCH_BASE", "")
    if not user_base:
        raise ImproperlyConfigured("LDAP login is on (SWITCHYARD_LDAP_SERVER_URI is set) but "
                                   "SWITCHYARD_LDAP_USER_SEARCH_BASE is not: name the subtree that holds the users, "
                                   "e.g. ou=people,dc=example,dc=com")
    group_type_name = env.get("SWITCHYARD_LDAP_GROUP_TYPE", "groupOfNames")
    if group_type_name not in LDAP_GROUP_TYPES:
        raise ImproperlyConfigured(f"SWITCHYARD_LDAP_GROUP_TYPE={group_type_name!r}: use one of "
                                   f"{', '.join(LDAP_GROUP_TYPES)}")
    group_type, group_filter = LDAP_GROUP_TYPES[group_type_name]
    options = {ldap.OPT_REFERRALS: 0, ldap.OPT_NETWORK_TIMEOUT: float(env.get("SWITCHYARD_LDAP_TIMEOUT", "5")),
               ldap.OPT_TIMEOUT: float(env.get("SWITCHYARD_LDAP_TIMEOUT", "5"))}
    if env.get("SWITCHYARD_LDAP_CA_FILE"):
        options[ldap.OPT_X_TLS_CACERTFILE] = env["SWITCHYARD_LDAP_CA_FILE"]
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_DEMAND
        options[ldap.OPT_X_TLS_NEWCTX] = 0  # last: makes the TLS context with the options above
    out.update({
        "AUTH_LDAP_BIND_DN": env.get("SWITCHYARD_LDAP_BIND_DN", ""),
        "AUTH_LDAP_BIND_PASSWORD": read_secret("SWITCHYARD_LDAP_BIND_PASSWORD", env, default="") or "",
        "AUTH_LDAP_START_TLS": _flag(env, "SWITCHYARD_LDAP_START_TLS", "0"),
        "AUTH_LDAP_CONNECTION_OPTIONS": options,
        "AUTH_LDAP_USER_SEARCH": ldap_config.LDAPSearch(
            user_base, ldap.SCOPE_SUBTREE, env.get("SWITCHYARD_LDAP_USER_FILTER", "(uid=%(user)s)")),
        "AUTH_LDAP_GROUP_SEARCH": ldap_config.LDAPSearch(
            env.get("SWITCHYARD_LDAP_GROUP_SEARCH_BASE", user_base), ldap.SCOPE_SUBTREE,
            env.get("SWITCHYARD_LDAP_GROUP_FILTER", group_filter)),
        "AUTH_LDAP_GROUP_TYPE": group_type(),
        # the profile and the roles and teams are written by apps.accounts.sso_actions, not by the library
        "AUTH_LDAP_USER_ATTR_MAP": {},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": False,
        "AUTH_LDAP_MIRROR_GROUPS": False,
        "AUTH_LDAP_FIND_GROUP_PERMS": False,
        "SWITCHYARD_LDAP_ATTRS": {"email": env.get("SWITCHYARD_LDAP_ATTR_EMAIL", "mail"),
                                  "first_name": env.get("SWITCHYARD_LDAP_ATTR_FIRST_NAME", "givenName"),
                                  "last_name": env.get("SWITCHYARD_LDAP_ATTR_LAST_NAME", "sn")},
    })
    return out
