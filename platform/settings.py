"""Settings of the Switchyard control plane.

Every value that differs between machines comes from a SWITCHYARD_* variable; the
defaults match the stack that `./dev up` starts (port base 27100).
"""

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from broker_core.secret_source import read_secret
from control_plane.sso_settings import ldap_settings, oidc_settings

BASE_DIR = Path(__file__).resolve().parent.parent
PROJECT_DIR = Path(__file__).resolve().parent  # platform/ in the repository, control_plane/ when installed
PORT_BASE = int(os.environ.get("SWITCHYARD_PORT_BASE", "27100"))
STATE_DIR = Path(os.environ.get("SWITCHYARD_STATE", BASE_DIR / ".devstack" / "dev"))

# Fail closed: DEBUG only when asked for; outside DEBUG no start without a secret key of this deployment.
DEBUG = os.environ.get("SWITCHYARD_DEBUG", "0") == "1"
# "production" adds what only HTTPS in front of the control plane makes possible (secure cookies, HSTS, redirect)
PROFILE = os.environ.get("SWITCHYARD_PROFILE", "development")
if PROFILE not in ("development", "production"):
    raise ImproperlyConfigured(f"SWITCHYARD_PROFILE={PROFILE!r}: use 'development' or 'production'")
SECRET_KEY = read_secret("SWITCHYARD_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "No secret key: the control plane does not start without one outside DEBUG. Put a random key of at "
            "least 50 characters in a file readable by its owner only and name it in SWITCHYARD_SECRET_KEY_FILE "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(48))' > secret-key; chmod 600 secret-key), "
            "or set SWITCHYARD_SECRET_KEY. `./dev up` and `./dev test` make one per state folder.")
    SECRET_KEY = "django-insecure-switchyard-debug-only"  # DEBUG only; `check --deploy` flags it
ALLOWED_HOSTS = os.environ.get("SWITCHYARD_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from pinned local assets, never a CDN
    "django_celery_beat",
    "apps.audit",
    "apps.accounts",
    "apps.clusters",
    "apps.topics",
    "apps.bindings",
    "apps.lifecycle",
    "apps.provisioning",
    "apps.tracing",
    "apps.transactions",
    "apps.moves",
    "apps.rebalancing",
    "apps.alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.oidc.SessionRecheck",  # an OIDC session is checked with the provider again (docs/sso.md)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.audit.middleware.ActionContextMiddleware",
    "axes.middleware.AxesMiddleware",  # last: answers a locked-out login with the lock-out page
]

ROOT_URLCONF = "control_plane.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PROJECT_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context_processors.roles",
            ],
        },
    },
]

WSGI_APPLICATION = "control_plane.wsgi.application"
ASGI_APPLICATION = "control_plane.asgi.application"

# PostgreSQL roles (docs/security.md): the running control plane (web, Celery, Spark's load) connects as the
# runtime role, which may only INSERT and SELECT the audit log; `manage.py migrate` and the test suite (which
# creates its test database) connect as the owner of the tables: SWITCHYARD_DB_ROLE=owner.
SWITCHYARD_DB_RUNTIME_USER = os.environ.get("SWITCHYARD_DB_USER", "switchyard_app")
SWITCHYARD_DB_OWNER_USER = os.environ.get("SWITCHYARD_DB_OWNER_USER", "switchyard_owner")
SWITCHYARD_DB_ROLE = os.environ.get("SWITCHYARD_DB_ROLE", "runtime")
if SWITCHYARD_DB_ROLE not in ("runtime", "owner"):
    raise ImproperlyConfigured(f"SWITCHYARD_DB_ROLE is {SWITCHYARD_DB_ROLE!r}: use 'runtime' (the default) or 'owner' "
                               "(manage.py migrate)")
_DB_AS_OWNER = SWITCHYARD_DB_ROLE == "owner"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("SWITCHYARD_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SWITCHYARD_DB_PORT", str(PORT_BASE)),
        "NAME": os.environ.get("SWITCHYARD_DB_NAME", "switchyard"),
        "USER": SWITCHYARD_DB_OWNER_USER if _DB_AS_OWNER else SWITCHYARD_DB_RUNTIME_USER,
        # the variable itself or the mode-600 file SWITCHYARD_DB_[OWNER_]PASSWORD_FILE names
        "PASSWORD": read_secret("SWITCHYARD_DB_OWNER_PASSWORD" if _DB_AS_OWNER else "SWITCHYARD_DB_PASSWORD",
                                default=""),
        "CONN_MAX_AGE": 60,
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# the browser libraries pinned in package.json + package-lock.json (`./dev` runs npm ci), served as our own files
NODE_MODULES = Path(os.environ.get("SWITCHYARD_NODE_MODULES", BASE_DIR / "node_modules"))
STATICFILES_DIRS = [PROJECT_DIR / "static", ("vendor/uplot", NODE_MODULES / "uplot" / "dist")]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.tokens.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["control_plane.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "control_plane.api.exception_handler",
    # per user and per anonymous address, counted in Redis (CACHES) so every gunicorn worker shares the count
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle",
                                 "rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": os.environ.get("SWITCHYARD_API_THROTTLE_ANON", "600/minute"),
                               "user": os.environ.get("SWITCHYARD_API_THROTTLE_USER", "6000/minute")},
    "DEFAULT_METADATA_CLASS": "control_plane.metadata.Metadata",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard API",
    "DESCRIPTION": "Message governance: clusters, topics, bindings, approvals, routing and audit.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # enums of the alarms by their own names, so that no other component's enum is renamed by a name collision
    "ENUM_NAME_OVERRIDES": {"AlertStatusEnum": "apps.alerts.choices.AlertStatus",
                            "AlertRuleKindEnum": "apps.alerts.choices.RuleKind"},
    # every operation lists the error answers any view may give (400/401/403/404/...): control_plane.schema
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "control_plane.schema.add_error_responses"],
}

CELERY_BROKER_URL = os.environ.get("SWITCHYARD_REDIS_URL", f"redis://127.0.0.1:{PORT_BASE + 1}/0")
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# ZooKeeper session timeout and the bound on every control-plane call into ZooKeeper.
SWITCHYARD_ZK_TIMEOUT = float(os.environ.get("SWITCHYARD_ZK_TIMEOUT", "3"))
# Provisioning retries: Celery's retry_backoff, in whole seconds (at least 1), doubling from the base up to the cap.
SWITCHYARD_PROVISION_BACKOFF_BASE = max(1, int(float(os.environ.get("SWITCHYARD_PROVISION_BACKOFF_BASE", "1"))))
SWITCHYARD_PROVISION_BACKOFF_MAX = max(1, int(float(os.environ.get("SWITCHYARD_PROVISION_BACKOFF_MAX", "60"))))
SWITCHYARD_PROVISION_MAX_ATTEMPTS = int(os.environ.get("SWITCHYARD_PROVISION_MAX_ATTEMPTS", "50"))

# bound on each broker /stats read behind the cluster page (brokers are read in parallel)
SWITCHYARD_BROKER_STATS_TIMEOUT = float(os.environ.get("SWITCHYARD_BROKER_STATS_TIMEOUT", "2"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {"()": "control_plane.logging.StructuredFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "root": {"handlers": ["console"], "level": os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO")},
    "loggers": {
        "kazoo": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},  # a line per request (a move polls every broker twice a second)
        "django.db.backends": {"level": "INFO"},
    },
}

# Message tracing: where the brokers' trace files are (each broker writes <data dir>/trace/, listed
# recursively), where the index lives, and the Spark master the index job runs on.
SWITCHYARD_TRACE_INPUTS = [p for p in os.environ.get("SWITCHYARD_TRACE_INPUTS", str(STATE_DIR / "brokers")).split(",") if p]
SWITCHYARD_TRACE_INDEX_DIR = os.environ.get("SWITCHYARD_TRACE_INDEX_DIR", str(STATE_DIR / "trace-index"))
SWITCHYARD_SPARK_MASTER = os.environ.get("SWITCHYARD_SPARK_MASTER", "local[*]")

# Transaction back-checks and dead-letter re-drive (apps/transactions). The brokers' admin API
# (http://<host>:<metrics_port>/admin/...) takes this bearer token; brokers get the same one.
# (the variable, or the mode-600 file SWITCHYARD_BROKER_ADMIN_TOKEN_FILE names; it also reads brokers' /stats)
SWITCHYARD_BROKER_ADMIN_TOKEN = read_secret("SWITCHYARD_BROKER_ADMIN_TOKEN", default="")
# bound on each admin call (a check call itself waits up to SWITCHYARD_TX_CHECK_TIMEOUT_MS on the broker)
SWITCHYARD_BROKER_ADMIN_TIMEOUT = float(os.environ.get("SWITCHYARD_BROKER_ADMIN_TIMEOUT", "10"))
SWITCHYARD_TX_CHECK_TIMEOUT_MS = int(os.environ.get("SWITCHYARD_TX_CHECK_TIMEOUT_MS", "3000"))
SWITCHYARD_TX_CHECK_BATCH = int(os.environ.get("SWITCHYARD_TX_CHECK_BATCH", "500"))  # message ids per check task
SWITCHYARD_TX_HTTP_CHECK_TIMEOUT = float(os.environ.get("SWITCHYARD_TX_HTTP_CHECK_TIMEOUT", "5"))
SWITCHYARD_REDRIVE_BATCH = int(os.environ.get("SWITCHYARD_REDRIVE_BATCH", "500"))  # dead letters per redrive call

# Topic moves (apps/moves, docs/migration.md): the pause between two looks of a waiting step, how long one
# task holds a move (a worker killed mid-step leaves it to expire), the run of steps one task makes before it
# queues the next, and how long a step waits before pushing again what has not landed.
SWITCHYARD_MOVE_POLL_S = float(os.environ.get("SWITCHYARD_MOVE_POLL_S", "0.5"))
SWITCHYARD_MOVE_LEASE_S = float(os.environ.get("SWITCHYARD_MOVE_LEASE_S", "60"))
SWITCHYARD_MOVE_RUN_BUDGET_S = float(os.environ.get("SWITCHYARD_MOVE_RUN_BUDGET_S", "20"))
SWITCHYARD_MOVE_REPUSH_S = float(os.environ.get("SWITCHYARD_MOVE_REPUSH_S", "10"))
SWITCHYARD_MOVE_DLQ_PAGE = int(os.environ.get("SWITCHYARD_MOVE_DLQ_PAGE", "500"))  # dead letters per export call
# Rebalances (docs/rebalance.md): the pause while a step waits, a task's lease, the most one run works.
SWITCHYARD_REBALANCE_POLL_S = float(os.environ.get("SWITCHYARD_REBALANCE_POLL_S", "0.5"))
SWITCHYARD_REBALANCE_LEASE_S = float(os.environ.get("SWITCHYARD_REBALANCE_LEASE_S", "60"))
SWITCHYARD_REBALANCE_RUN_BUDGET_S = float(os.environ.get("SWITCHYARD_REBALANCE_RUN_BUDGET_S", "20"))

# The audit chain's head, HMAC-signed, is written here every 30 s (Celery beat) and on every export, so
# `manage.py audit_verify` notices deleted tail records and truncation (apps/audit/checkpoint.py).
# Monitoring (docs/alerts.md): the folder Prometheus and Alertmanager read (targets, rules, Alertmanager's
# configuration), their addresses, and the token they present to /metrics and /alerts/notify (the variable, or
# the mode-600 file SWITCHYARD_MONITORING_TOKEN_FILE names; without one both endpoints refuse everyone)
SWITCHYARD_MONITORING_DIR = os.environ.get("SWITCHYARD_MONITORING_DIR", str(STATE_DIR / "monitoring"))
SWITCHYARD_MONITORING_TOKEN = read_secret("SWITCHYARD_MONITORING_TOKEN", default="")
SWITCHYARD_MONITORING_TOKEN_FILE = os.environ.get("SWITCHYARD_MONITORING_TOKEN_FILE", "")
SWITCHYARD_PROMETHEUS_URL = os.environ.get("SWITCHYARD_PROMETHEUS_URL", f"http://127.0.0.1:{PORT_BASE + 3}")
# each query of the console's plots (apps/clusters/series.py); past it the page says Prometheus did not answer
SWITCHYARD_PROMETHEUS_TIMEOUT = float(os.environ.get("SWITCHYARD_PROMETHEUS_TIMEOUT", "5"))
SWITCHYARD_ALERTMANAGER_URL = os.environ.get("SWITCHYARD_ALERTMANAGER_URL", f"http://127.0.0.1:{PORT_BASE + 4}")
# where Alertmanager posts every notification for the console's history of alerts (this web server)
SWITCHYARD_CONTROL_PLANE_URL = os.environ.get("SWITCHYARD_CONTROL_PLANE_URL", f"http://127.0.0.1:{PORT_BASE + 10}")
SWITCHYARD_ALERT_SMTP_SMARTHOST = os.environ.get("SWITCHYARD_ALERT_SMTP_SMARTHOST", "127.0.0.1:25")
SWITCHYARD_ALERT_SMTP_FROM = os.environ.get("SWITCHYARD_ALERT_SMTP_FROM", "switchyard-alerts@localhost")
SWITCHYARD_ALERT_SMTP_REQUIRE_TLS = os.environ.get("SWITCHYARD_ALERT_SMTP_REQUIRE_TLS", "0") == "1"
# SMTP authentication: the user, and the path of a mode-600 file with the password (Alertmanager reads the file;
# the password itself is never written into its configuration)
SWITCHYARD_ALERT_SMTP_USERNAME = os.environ.get("SWITCHYARD_ALERT_SMTP_USERNAME", "")
SWITCHYARD_ALERT_SMTP_PASSWORD_FILE = os.environ.get("SWITCHYARD_ALERT_SMTP_PASSWORD_FILE", "")
# Alertmanager's grouping timers: how long it waits before the first, the next, and a repeated notification
SWITCHYARD_ALERT_GROUP_WAIT = os.environ.get("SWITCHYARD_ALERT_GROUP_WAIT", "30s")
SWITCHYARD_ALERT_GROUP_INTERVAL = os.environ.get("SWITCHYARD_ALERT_GROUP_INTERVAL", "1m")
SWITCHYARD_ALERT_REPEAT_INTERVAL = os.environ.get("SWITCHYARD_ALERT_REPEAT_INTERVAL", "4h")

SWITCHYARD_AUDIT_CHECKPOINT_DIR = os.environ.get("SWITCHYARD_AUDIT_CHECKPOINT_DIR", str(STATE_DIR / "audit-checkpoints"))
SWITCHYARD_AUDIT_CHECKPOINT_KEY = read_secret("SWITCHYARD_AUDIT_CHECKPOINT_KEY", default="")

# --- logins, API tokens, the production profile (docs/security.md) ---------------------------------

# Shared by every process (DRF's throttle counts); Django's default cache is per process.
CACHES = {
    "default": {
        "BACKEND": "control_plane.cache.RedisCache",  # Django's, one client per pool (platform/cache.py)
        "LOCATION": os.environ.get("SWITCHYARD_CACHE_URL", f"redis://127.0.0.1:{PORT_BASE + 1}/1"),
        "KEY_PREFIX": f"switchyard-{os.environ.get('SWITCHYARD_DB_NAME', 'switchyard')}",
    }
}

# Login throttling (django-axes, attempts kept in PostgreSQL): after AXES_FAILURE_LIMIT failed logins for one
# username from one address, logins of that pair are refused, right password or not, until the cool-off ends
# or an admin lifts the lock-out (Security → Lock-outs). Web form, admin login and POST /api/v1/auth/token/.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # LDAP (SWITCHYARD_LDAP_*) before local passwords: a directory user's login is then not slowed by the local
    # backend's hashing of the password given (done for unknown names too, so they answer as slowly as known ones)
    "apps.accounts.ldap_login.DirectoryBackend",
    "apps.accounts.sso_backends.LocalPasswordBackend",  # local passwords (SWITCHYARD_LOCAL_LOGIN); every permission
    "apps.accounts.oidc.OidcBackend",  # OpenID Connect (SWITCHYARD_OIDC_*)
]
AXES_FAILURE_LIMIT = int(os.environ.get("SWITCHYARD_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("SWITCHYARD_LOGIN_COOLOFF_MINUTES", "30")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_IPWARE_PROXY_COUNT = int(os.environ.get("SWITCHYARD_PROXY_COUNT", "0"))  # proxies in front that add X-F-F
AXES_LOCKOUT_CALLABLE = "apps.accounts.lockouts.lockout_response"  # JSON on /api/, the lock-out page elsewhere
AXES_ENABLE_ADMIN = False  # lock-outs are lifted through the audited action (Security → Lock-outs)
AXES_VERBOSE = False
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]  # masked in stored attempts

# API tokens (django-rest-knox, our model): only a SHA-512 digest is stored; every token expires.
KNOX_TOKEN_MODEL = "accounts.ApiToken"
MIGRATION_MODULES = {"knox": None}  # knox's own token table is swapped out for accounts.ApiToken: never created
REST_KNOX = {"TOKEN_TTL": timedelta(days=30), "AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}

# --- single sign-on (docs/sso.md) -------------------------------------------------------------------------

# Local passwords on the login form and at POST /api/v1/auth/token/; off, only SSO logs people in (keep one
# local admin until SSO works: with it off, `manage.py changepassword` still sets passwords, which then do nothing)
SWITCHYARD_LOCAL_LOGIN = os.environ.get("SWITCHYARD_LOCAL_LOGIN", "1") == "1"
SESSION_COOKIE_AGE = int(float(os.environ.get("SWITCHYARD_SESSION_HOURS", "12")) * 3600)
globals().update(oidc_settings(os.environ))
globals().update(ldap_settings(os.environ))

if PROFILE == "production":
    # HTTPS terminates in front of the control plane (a proxy that sets X-Forwarded-Proto).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SWITCHYARD_HSTS_SECONDS", str(365 * 86400)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
