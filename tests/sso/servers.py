"""The two identity servers of the SSO tests, started once per run: OpenLDAP (devstack/ldap.py) and an OpenID
provider (tests/sso/provider, django-oauth-toolkit in a gunicorn process of its own), with helpers that change
their users and groups the way a directory admin would."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import ldap
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from broker_core.secret_source import read_secret_file, write_secret_file
from devstack import services
from devstack.ldap import GROUPS, PEOPLE, Directory
from devstack.processes import ServiceError, port_open, spawn, stop_pid, wait_until

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "switchyard-tests"
PASSWORD = "directory-pw-1"
PLACEHOLDER_MEMBER = b"cn=nobody"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- LDAP --------------------------------------------------------------------------------------------------


class DirectoryAdmin:
    """Writes to the test directory as its admin (the root DN)."""

    def __init__(self, directory: Directory):
        self.directory = directory
        self.conn = ldap.initialize(directory.uri)
        self.conn.simple_bind_s(directory.admin_dn, read_secret_file(directory.admin_password_file))

    def close(self) -> None:
        self.conn.unbind_s()

    @staticmethod
    def user_dn(uid: str) -> str:
        return f"uid={uid},{PEOPLE}"

    @staticmethod
    def group_dn(name: str) -> str:
        return f"cn={name},{GROUPS}"

    def add_user(self, uid: str, password: str = PASSWORD, groups=(), mail: str | None = None) -> str:
        entry = {"objectClass": [b"inetOrgPerson"], "uid": [uid.encode()], "cn": [uid.encode()],
                 "sn": [b"Tester"], "givenName": [uid.title().encode()],
                 "mail": [(mail or f"{uid}@example.com").encode()], "userPassword": [password.encode()]}
        self.conn.add_s(self.user_dn(uid), list(entry.items()))
        for group in groups:
            self.add_to_group(uid, group)
        return self.user_dn(uid)

    def add_to_group(self, uid: str, group: str) -> None:
        member = self.user_dn(uid).encode()
        try:
            self.conn.modify_s(self.group_dn(group), [(ldap.MOD_ADD, "member", [member])])
        except ldap.NO_SUCH_OBJECT:
            # groupOfNames needs a member: a placeholder keeps a group whose last person leaves
            self.conn.add_s(self.group_dn(group), [("objectClass", [b"groupOfNames"]), ("cn", [group.encode()]),
                                                   ("member", [PLACEHOLDER_MEMBER, member])])

    def remove_from_group(self, uid: str, group: str) -> None:
        self.conn.modify_s(self.group_dn(group), [(ldap.MOD_DELETE, "member", [self.user_dn(uid).encode()])])

    def disable(self, uid: str) -> None:
        """What the test directory's user filter calls disabled (an AD would set userAccountControl)."""
        self.conn.modify_s(self.user_dn(uid), [(ldap.MOD_REPLACE, "employeeType", [b"disabled"])])


# --- the OpenID provider -----------------------------------------------------------------------------------


@dataclass
class Provider:
    url: str  # http://127.0.0.1:<port>
    admin_token: str
    client_secret_file: Path

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def control_plane_environment(self) -> dict[str, str]:
        """SWITCHYARD_OIDC_* for a control plane that logs people in through this provider."""
        return {
            "SWITCHYARD_OIDC_ISSUER": self.issuer,
            "SWITCHYARD_OIDC_CLIENT_ID": CLIENT_ID,
            "SWITCHYARD_OIDC_CLIENT_SECRET_FILE": str(self.client_secret_file),
            "SWITCHYARD_OIDC_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize/",
            "SWITCHYARD_OIDC_TOKEN_ENDPOINT": f"{self.issuer}/token/",
            "SWITCHYARD_OIDC_USERINFO_ENDPOINT": f"{self.issuer}/userinfo/",
            "SWITCHYARD_OIDC_JWKS_ENDPOINT": f"{self.issuer}/.well-known/jwks.json",
            "SWITCHYARD_OIDC_END_SESSION_ENDPOINT": f"{self.issuer}/logout/",
            "SWITCHYARD_OIDC_LABEL": "Test IdP",
        }

    def _put(self, path: str, body: dict) -> dict:
        answer = httpx.put(f"{self.url}{path}", json=body, timeout=10,
                           headers={"Authorization": f"Bearer {self.admin_token}"})
        answer.raise_for_status()
        return answer.json()

    def put_user(self, username: str, groups=(), password: str = PASSWORD, active: bool = True) -> str:
        """Create or replace a user of the provider; returns its `sub`."""
        return self._put(f"/directory/users/{username}/", {"password": password, "email": f"{username}@example.com",
                                                           "first_name": username.title(), "groups": list(groups),
                                                           "active": active})["sub"]

    def register_client(self) -> None:
        self._put("/directory/client/", {
            "client_id": CLIENT_ID, "client_secret": read_secret_file(self.client_secret_file),
            # loopback callbacks match any port (RFC 8252): the live server's, and the test client's testserver
            "redirect_uris": ["http://localhost/oidc/callback/", "http://127.0.0.1/oidc/callback/",
                              "http://testserver/oidc/callback/"],
            "post_logout_redirect_uris": ["http://localhost/login/", "http://testserver/login/"]})


def start_provider(state: Path, port: int) -> Provider:
    folder = state / "oidc-provider"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "provider.sqlite3").unlink(missing_ok=True)  # a fresh provider each run
    key_file = state / "secrets" / "oidc-provider-rsa-key"
    if not key_file.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_secret_file(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()).decode())
    admin_token_file = services.secret_file(state, "oidc-provider-admin-token")
    env = {"DJANGO_SETTINGS_MODULE": "tests.sso.provider.settings", "PYTHONPATH": str(ROOT),
           "OIDC_PROVIDER_STATE": str(folder), "OIDC_PROVIDER_ISSUER": f"http://127.0.0.1:{port}/o",
           "OIDC_PROVIDER_SECRET_KEY_FILE": str(services.secret_file(state, "oidc-provider-secret-key", nbytes=48)),
           "OIDC_PROVIDER_RSA_KEY_FILE": str(key_file), "OIDC_PROVIDER_ADMIN_TOKEN_FILE": str(admin_token_file)}
    pidfile = state / "pids" / "oidc-provider.pid"
    stop_pid(pidfile, "oidc-provider")
    migrated = subprocess.run([sys.executable, "-m", "django", "migrate", "--run-syncdb", "--noinput", "-v", "0"], cwd=ROOT,
                              env={**_clean_environ(), **env}, capture_output=True, text=True, timeout=120)
    if migrated.returncode != 0:
        raise ServiceError(f"the OIDC provider's migrate failed: {migrated.stderr.strip()}")
    spawn("oidc-provider", [sys.executable, "-m", "gunicorn", "tests.sso.provider.wsgi", "-b",
                                     f"127.0.0.1:{port}", "-w", "1", "--threads", "4", "--no-control-socket",
                                     "--graceful-timeout", "2"],  # a browser's keep-alive must not hold the stop
                   state, env, ROOT)
    provider = Provider(url=f"http://127.0.0.1:{port}", admin_token=read_secret_file(admin_token_file),
                        client_secret_file=services.secret_file(state, "oidc-client-secret"))
    wait_until(lambda: port_open(port), 30, f"the OIDC provider on {port} "
                                                              f"(log: {state / 'logs' / 'oidc-provider.log'})")
    provider.register_client()
    return provider


def _clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}


def stop_provider(state: Path) -> None:
    stop_pid(state / "pids" / "oidc-provider.pid", "oidc-provider")


def walk_provider(start: str, provider: Provider, username: str, password: str = PASSWORD,
                  browser: httpx.Client | None = None) -> str:
    """A person at the provider: follow its redirects from `start` (an authorize or logout URL), sign in when it
    asks, and return the first URL that leads away from it (Switchyard's callback or login page)."""
    browser = browser or httpx.Client(timeout=10)
    url = start
    for _ in range(10):
        if not url.startswith(provider.url):
            return url
        answer = browser.get(url)
        if answer.status_code == 200 and "id_username" in answer.text:  # its login page
            answer = browser.post(url, data={"username": username, "password": password,
                                             "csrfmiddlewaretoken": browser.cookies["provider_csrftoken"],
                                             "next": dict(httpx.URL(url).params).get("next", "")})
            if answer.status_code != 302:
                raise AssertionError(f"the provider refused the login of {username}: {answer.status_code}")
        if answer.status_code not in (301, 302, 303):
            raise AssertionError(f"the provider answered {answer.status_code} at {url}: {answer.text[:300]}")
        url = urljoin(url, answer.headers["Location"])
    raise AssertionError("the provider kept redirecting")


def path_of(url: str) -> str:
    """The path and query of an absolute URL (what the test client requests)."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path
