from apps.provisioning.api.views import ReconcileRunViewSet, RouteViewSet, SyncStateViewSet


def register(router) -> None:
    router.register("sync-states", SyncStateViewSet, basename="sync-state")
    router.register("reconcile-runs", ReconcileRunViewSet, basename="reconcile-run")
    router.register("routes", RouteViewSet, basename="route")
