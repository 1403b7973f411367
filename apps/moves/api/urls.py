from apps.moves.api.views import TopicMoveViewSet


def register(router) -> None:
    router.register("moves", TopicMoveViewSet, basename="move")
