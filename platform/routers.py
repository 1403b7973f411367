"""The one router of /api/v1/; each app registers its viewsets in its api/urls.py `register` function."""

from rest_framework.routers import DefaultRouter

from apps.accounts.api import ApiTokenViewSet, LockoutViewSet, ServiceAccountViewSet, TeamViewSet
from apps.accounts.sso_api import SsoMappingViewSet
from apps.alerts.api.urls import register as register_alerts
from apps.audit.api.urls import register as register_audit
from apps.bindings.api.urls import register as register_bindings
from apps.clusters.api.views import ClusterViewSet
from apps.lifecycle.api.urls import register as register_lifecycle
from apps.moves.api.urls import register as register_moves
from apps.provisioning.api.urls import register as register_provisioning
from apps.rebalancing.api.urls import register as register_rebalancing
from apps.topics.api.urls import register as register_topics
from apps.tracing.api.urls import register as register_tracing
from apps.transactions.api.urls import register as register_transactions

api_router = DefaultRouter()
api_router.register("clusters", ClusterViewSet, basename="cluster")
api_router.register("teams", TeamViewSet, basename="team")
api_router.register("tokens", ApiTokenViewSet, basename="token")
api_router.register("service-accounts", ServiceAccountViewSet, basename="service-account")
api_router.register("lockouts", LockoutViewSet, basename="lockout")
api_router.register("sso-mappings", SsoMappingViewSet, basename="sso-mapping")
register_topics(api_router)
register_bindings(api_router)
register_lifecycle(api_router)
register_provisioning(api_router)
register_tracing(api_router)
register_audit(api_router)
register_transactions(api_router)
register_moves(api_router)
register_rebalancing(api_router)
register_alerts(api_router)
