from apps.lifecycle.api.views import LifecycleApplicationViewSet


def register(router) -> None:
    router.register("lifecycle-applications", LifecycleApplicationViewSet, basename="lifecycle-application")
