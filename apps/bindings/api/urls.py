from apps.bindings.api.views import (
    BindingApplicationViewSet,
    BindingViewSet,
    GrantApplicationViewSet,
    ProducerGrantViewSet,
)


def register(router) -> None:
    router.register("bindings", BindingViewSet, basename="binding")
    router.register("grants", ProducerGrantViewSet, basename="grant")
    router.register("binding-applications", BindingApplicationViewSet, basename="binding-application")
    router.register("grant-applications", GrantApplicationViewSet, basename="grant-application")
