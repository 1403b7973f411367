"""How the OpenAPI schema describes our token authentication (`Authorization: Token <token>`)."""

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme


class ApiTokenScheme(KnoxTokenScheme):
    target_class = "apps.accounts.tokens.ApiTokenAuthentication"
    name = "tokenAuth"
