from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.shortcuts import get_object_or_404, render
from django.views import View
from django.views.generic import ListView

from apps.bindings.filtersets import BindingFilterSet
from apps.bindings.forms import BindingApplicationForm, GrantApplicationForm
from apps.bindings.models import Binding, BindingApplication, GrantApplication
from apps.governance import views as governance
from apps.provisioning.models import SyncState
from apps.provisioning.status import live_status_of


class BindingListView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "bindings.view_binding"
    template_name = "bindings/binding_list.html"
    paginate_by = 50

    def get_queryset(self):
        self.filterset = BindingFilterSet(self.request.GET,
                                          queryset=Binding.objects.select_related("topic__cluster", "app"))
        return self.filterset.qs

    def get_context_data(self, **kwargs):
        context = super().get_context_data(filterset=self.filterset, **kwargs)
        page = context["object_list"]
        sync = {s.object_id: s for s in SyncState.objects.filter(kind="binding", object_id__in=[b.pk for b in page])}
        context["rows"] = [(b, sync.get(b.pk)) for b in page]
        return context


class BindingDetailView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "bindings.view_binding"

    def get(self, request, pk):
        binding = get_object_or_404(Binding.objects.select_related("topic__cluster", "app"), pk=pk)
        return render(request, "bindings/binding_detail.html",
                      {"object": binding, "sync": live_status_of("binding", binding)})


def _topic_rows(a) -> list[tuple[str, object]]:
    """The first rows of an application on a topic: the topic and the team that owns (and approves) it."""
    return [("Topic", f"{a.topic.name} ({a.topic.get_environment_display()}, cluster {a.topic.cluster.name})"),
            ("Topic owner", a.topic.team.name)]


# --- binding applications -------------------------------------------------------------------


class BindingApplicationFormView(governance.ApplicationFormView):
    model = BindingApplication
    form_class = BindingApplicationForm
    noun = "binding"


class BindingApplicationDetailView(governance.ApplicationDetailView):
    model = BindingApplication
    noun = "Binding"

    def fields(self, a):
        return [
            *_topic_rows(a), ("Consumer app", f"{a.app.app_id} ({a.app.team.name})"), ("Consumer group", a.group),
            ("Selector", f"{a.get_selector_kind_display()}: {a.selector_pattern}"),
            ("Delivery mode", a.get_mode_display()), ("Delivery limit", a.delivery_limit),
            ("TTL", f"{a.ttl_s} s"),
            ("Retry backoff", f"{a.backoff_initial_ms} ms × {a.backoff_multiplier:g}, at most {a.backoff_max_ms} ms"),
            ("Max in flight per consumer", a.max_in_flight), ("On failure", a.get_on_failure_display()),
            ("Description", a.description or "—"), ("Reason", a.reason),
        ]


# --- producer grant applications ---------------------------------------------------------------


class GrantApplicationFormView(governance.ApplicationFormView):
    model = GrantApplication
    form_class = GrantApplicationForm
    noun = "producer grant"


class GrantApplicationDetailView(governance.ApplicationDetailView):
    model = GrantApplication
    noun = "Producer grant"

    def fields(self, a):
        return [*_topic_rows(a), ("Producer app", f"{a.app.app_id} ({a.app.team.name})"),
                ("Description", a.description or "—"), ("Reason", a.reason)]
