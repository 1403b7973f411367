"""The one router of /api/v1/; each app registers its viewsets in its api/urls.py `register` function."""

from rest_framework.routers import DefaultRouter

from apps.accounts.api import TeamViewSet
from apps.clusters.api.views import ClusterViewSet

api_router = DefaultRouter()
api_router.register("clusters", ClusterViewSet, basename="cluster")
api_router.register("teams", TeamViewSet, basename="team")
