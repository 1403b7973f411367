from apps.rebalancing.api.views import RebalanceViewSet


def register(router) -> None:
    router.register("rebalances", RebalanceViewSet, basename="rebalance")
