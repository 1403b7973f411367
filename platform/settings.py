"""Settings of the Switchyard control plane.

Every value that differs between machines comes from a SWITCHYARD_* variable; the
defaults match the stack that `./dev up` starts (port base 27100).
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PROJECT_DIR = Path(__file__).resolve().parent  # platform/ in the repository, control_plane/ when installed
PORT_BASE = int(os.environ.get("SWITCHYARD_PORT_BASE", "27100"))
STATE_DIR = Path(os.environ.get("SWITCHYARD_STATE", BASE_DIR / ".devstack" / "dev"))

SECRET_KEY = os.environ.get("SWITCHYARD_SECRET_KEY", "switchyard-development-key-change-me-in-production")
DEBUG = os.environ.get("SWITCHYARD_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("SWITCHYARD_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from pinned local assets, never a CDN
    "django_celery_beat",
    "apps.audit",
    "apps.accounts",
    "apps.clusters",
    "apps.topics",
    "apps.bindings",
    "apps.provisioning",
    "apps.tracing",
    "apps.transactions",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.audit.middleware.ActionContextMiddleware",
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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("SWITCHYARD_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SWITCHYARD_DB_PORT", str(PORT_BASE)),
        "NAME": os.environ.get("SWITCHYARD_DB_NAME", "switchyard"),
        "USER": os.environ.get("SWITCHYARD_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("SWITCHYARD_DB_PASSWORD", ""),
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
STATICFILES_DIRS = [PROJECT_DIR / "static"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
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
SWITCHYARD_BROKER_ADMIN_TOKEN = os.environ.get("SWITCHYARD_BROKER_ADMIN_TOKEN", "")
# bound on each admin call (a check call itself waits up to SWITCHYARD_TX_CHECK_TIMEOUT_MS on the broker)
SWITCHYARD_BROKER_ADMIN_TIMEOUT = float(os.environ.get("SWITCHYARD_BROKER_ADMIN_TIMEOUT", "10"))
SWITCHYARD_TX_CHECK_TIMEOUT_MS = int(os.environ.get("SWITCHYARD_TX_CHECK_TIMEOUT_MS", "3000"))
SWITCHYARD_TX_CHECK_BATCH = int(os.environ.get("SWITCHYARD_TX_CHECK_BATCH", "500"))  # message ids per check task
SWITCHYARD_TX_HTTP_CHECK_TIMEOUT = float(os.environ.get("SWITCHYARD_TX_HTTP_CHECK_TIMEOUT", "5"))
SWITCHYARD_REDRIVE_BATCH = int(os.environ.get("SWITCHYARD_REDRIVE_BATCH", "500"))  # dead letters per redrive call
