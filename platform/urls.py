from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.accounts import oidc, sso_views
from apps.accounts.api import ObtainTokenView
from apps.governance.api import ApplicationLookupView, ApprovalQueueView
from control_plane import views
from control_plane.metrics import metrics
from control_plane.routers import api_router

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", sso_views.LoginView.as_view(), name="login"),
    path("logout/", oidc.LogoutView.as_view(), name="logout"),
    path("oidc/authenticate/", oidc.OidcLoginView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.OidcCallbackView.as_view(), name="oidc_authentication_callback"),
    path("oidc/logout/", oidc.LogoutView.as_view(), name="oidc_logout"),
    path("", include("apps.accounts.urls")),
    path("clusters/", include("apps.clusters.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.tracing.api.urls")),
    path("api/v1/", include("apps.alerts.api.urls")),
    path("api/v1/", include(api_router.urls)),
    path("api/v1/auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("api/v1/approvals/", ApprovalQueueView.as_view(), name="api-approvals"),
    re_path(r"^api/v1/applications/(?P<ref>[A-Za-z]-[0-9]{1,18}|[0-9]{1,18})/$", ApplicationLookupView.as_view(),
            name="api-application-lookup"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("", include("apps.topics.urls")),
    path("", include("apps.bindings.urls")),
    path("", include("apps.lifecycle.urls")),
    path("", include("apps.governance.urls")),
    path("", include("apps.provisioning.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.tracing.urls")),
    path("", include("apps.transactions.urls")),
    path("", include("apps.moves.urls")),
    path("", include("apps.rebalancing.urls")),
    path("", include("apps.alerts.urls")),
    path("metrics", metrics, name="metrics"),
]

handler403 = "control_plane.views.forbidden"
handler404 = "control_plane.views.not_found"
handler500 = "control_plane.views.server_error"
