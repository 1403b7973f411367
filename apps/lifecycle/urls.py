from django.urls import path

from apps.lifecycle import views
from apps.lifecycle.choices import Operation, Target

app_name = "lifecycle"


def _form(route: str, target: str, operation: str, name: str, key: str = "int:key"):
    return path(route.replace("KEY", f"<{key}>"),
                views.LifecycleFormView.as_view(target_kind=target, operation=operation), name=name)


urlpatterns = [
    _form("topics/KEY/change/", Target.TOPIC, Operation.CHANGE, "topic-change"),
    _form("topics/KEY/retire/", Target.TOPIC, Operation.RETIRE, "topic-retire"),
    _form("bindings/KEY/change/", Target.BINDING, Operation.CHANGE, "binding-change"),
    _form("bindings/KEY/remove/", Target.BINDING, Operation.REMOVE, "binding-remove"),
    _form("grants/KEY/revoke/", Target.GRANT, Operation.REVOKE, "grant-revoke"),
    _form("apps/KEY/deactivate/", Target.APP, Operation.DEACTIVATE, "app-deactivate", key="slug:key"),
    _form("apps/KEY/activate/", Target.APP, Operation.ACTIVATE, "app-activate", key="slug:key"),
    path("bindings/<int:pk>/drop-backlog/", views.DropBacklogView.as_view(), name="drop-backlog"),
    path("applications/lifecycle/<int:pk>/", views.LifecycleDetailView.as_view(), name="application-detail"),
    path("applications/lifecycle/<int:pk>/edit/", views.LifecycleFormView.as_view(), name="application-edit"),
    path("applications/lifecycle/<int:pk>/<slug:verb>/", views.LifecycleVerbView.as_view(), name="application-verb"),
]
