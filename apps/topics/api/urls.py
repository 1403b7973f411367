from apps.topics.api.views import AppViewSet, TopicApplicationViewSet, TopicViewSet


def register(router) -> None:
    router.register("apps", AppViewSet, basename="app")
    router.register("topics", TopicViewSet, basename="topic")
    router.register("topic-applications", TopicApplicationViewSet, basename="topic-application")
