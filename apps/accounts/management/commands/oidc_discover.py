"""`manage.py oidc_discover ISSUER_URL`: read the provider's discovery document and print the SWITCHYARD_OIDC_*
variables of its endpoints (docs/sso.md)."""

from __future__ import annotations

import httpx
from django.core.management.base import BaseCommand, CommandError

VARIABLES = {
    "SWITCHYARD_OIDC_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "SWITCHYARD_OIDC_TOKEN_ENDPOINT": "token_endpoint",
    "SWITCHYARD_OIDC_USERINFO_ENDPOINT": "userinfo_endpoint",
    "SWITCHYARD_OIDC_JWKS_ENDPOINT": "jwks_uri",
    "SWITCHYARD_OIDC_END_SESSION_ENDPOINT": "end_session_endpoint",
}


class Command(BaseCommand):
    help = "Print the SWITCHYARD_OIDC_* endpoint variables from an OpenID provider's discovery document."

    def add_arguments(self, parser):
        parser.add_argument("issuer", help="the issuer URL, e.g. https://login.example.com/realms/acme")
        parser.add_argument("--timeout", type=float, default=10)

    def handle(self, issuer, timeout, **options):
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            answer = httpx.get(url, timeout=timeout, follow_redirects=False)
            answer.raise_for_status()
            document = answer.json()
        except (httpx.HTTPError, ValueError) as error:
            raise CommandError(f"could not read {url}: {error}. Check the issuer URL (it is the `iss` of the "
                               "provider's tokens) and that this host reaches it.") from error
        if document.get("issuer") != issuer:
            raise CommandError(f"the document at {url} names the issuer {document.get('issuer')!r}, not {issuer!r}: "
                               "use exactly the issuer it names")
        if "S256" not in document.get("code_challenge_methods_supported", ["S256"]):
            self.stderr.write("warning: the provider does not announce PKCE with S256; Switchyard sends it anyway")
        self.stdout.write(f"SWITCHYARD_OIDC_ISSUER={issuer}")
        for variable, key in VARIABLES.items():
            if document.get(key):
                self.stdout.write(f"{variable}={document[key]}")
            elif key != "end_session_endpoint":
                raise CommandError(f"the discovery document has no {key}")
