"""A tiny OpenID provider for the SSO tests: django-oauth-toolkit's OIDC provider in a Django process of its own
(tests/sso/conftest.py starts it with gunicorn on its own port). Its users, their groups and the Switchyard
client are set through /directory/ (views.py), authorized by a token from a file."""

import os
from pathlib import Path

from broker_core.secret_source import read_secret

STATE = Path(os.environ["OIDC_PROVIDER_STATE"])
ISSUER = os.environ["OIDC_PROVIDER_ISSUER"]
SECRET_KEY = read_secret("OIDC_PROVIDER_SECRET_KEY")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "oauth2_provider"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.sso.provider.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [Path(__file__).parent / "templates"],
              "APP_DIRS": True, "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                                   "django.contrib.auth.context_processors.auth"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": STATE / "provider.sqlite3",
                         "OPTIONS": {"timeout": 20}}}
# a throwaway database: its tables are made straight from the models (`migrate --run-syncdb`), in a second
MIGRATION_MODULES = {app: None for app in ("auth", "contenttypes", "sessions", "oauth2_provider")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# its own cookie names: a browser sends cookies to every port of a host
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only: fast
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": read_secret("OIDC_PROVIDER_RSA_KEY"),
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "email": "Email", "profile": "Profile"},
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.provider.views.ClaimsValidator",
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "ALLOW_LOCALHOST_LOOPBACK": True,  # pytest-django's live server is http://localhost:<any port>
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "handlers": {"console": {"class": "logging.StreamHandler"}},
           "root": {"handlers": ["console"], "level": "WARNING"}}
