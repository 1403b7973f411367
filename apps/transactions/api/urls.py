from apps.transactions.api.dead_letters import DeadLetterViewSet
from apps.transactions.api.views import PreparedMessageViewSet, RedriveViewSet


def register(router) -> None:
    router.register("tx/messages", PreparedMessageViewSet, basename="tx-message")
    router.register("redrives", RedriveViewSet, basename="redrive")
    router.register("dead-letters", DeadLetterViewSet, basename="dead-letter")
