from django.urls import path

from apps.governance.routes import application_urls
from apps.lifecycle import views
from apps.lifecycle.choices import Operation, Target
from apps.lifecycle.models import LifecycleApplication

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
    # made from the page of what it changes (the forms above), not from a blank form
    *application_urls("applications/lifecycle/", LifecycleApplication, form_view=views.LifecycleFormView,
                      detail_view=views.LifecycleDetailView, create=False),
]
