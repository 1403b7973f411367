from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import ListView

from apps.accounts.models import Team
from apps.accounts.roles import ADMIN, has_role
from apps.bindings.models import Binding, ProducerGrant
from apps.clusters.broker_stats import read_cluster_stats, topic_figures
from apps.clusters.ordering import ordering_of
from apps.clusters.rescale import read_rescale_or_none
from apps.clusters.zookeeper import read_health
from apps.governance import views as governance
from apps.governance.policy import is_member
from apps.governance.workflow import State
from apps.provisioning.models import SyncState
from apps.provisioning.routing import route_of
from apps.provisioning.status import live_status_of
from apps.topics import actions
from apps.topics.filtersets import TopicFilterSet
from apps.topics.forms import AppForm, TopicApplicationForm
from apps.topics.models import App, Topic, TopicApplication
from control_plane.web import errors_on


def _recorded(kind: str, ids) -> dict[int, SyncState]:
    return {s.object_id: s for s in SyncState.objects.filter(kind=kind, object_id__in=list(ids))}


class TopicListView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "topics.view_topic"
    template_name = "topics/topic_list.html"
    paginate_by = 50

    def get_queryset(self):
        self.filterset = TopicFilterSet(self.request.GET, queryset=Topic.objects.select_related("team", "cluster"))
        return self.filterset.qs

    def get_context_data(self, **kwargs):
        context = super().get_context_data(filterset=self.filterset, **kwargs)
        page = context["object_list"]
        sync = _recorded("topic", [t.pk for t in page])
        context["rows"] = [(t, sync.get(t.pk)) for t in page]
        return context


class TopicDetailView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """The topic, its route, its node as read from ZooKeeper now, its live figures as its cluster's brokers give them
    now (once it was provisioned there), its key mapping (for an ordered topic with the drain progress of its last
    rescale and its groups' partition assignments), and its bindings and grants."""

    permission_required = "topics.view_topic"

    def get(self, request, pk):
        topic = get_object_or_404(Topic.objects.select_related("team", "cluster"), pk=pk)
        bindings = list(Binding.objects.filter(topic=topic).select_related("app"))
        grants = list(ProducerGrant.objects.filter(topic=topic).select_related("app"))
        bsync, gsync = _recorded("binding", [b.pk for b in bindings]), _recorded("grant", [g.pk for g in grants])
        sync = live_status_of("topic", topic)
        health = read_health(topic.cluster) if sync and topic.status != "deleted" else None
        live = read_cluster_stats(health) if health is not None else None
        ordering = rescale = None
        if health is not None and health.reachable:
            placed = next((t for t in health.partitions if t.topic == topic.name), None)
            if placed is not None:  # its key mapping and, when ordered, the drain progress of its last rescale
                rescale = read_rescale_or_none(topic.cluster, topic.name, ordered=topic.ordered)
            if topic.ordered:
                ordering = ordering_of(topic.name, placed, live, rescale)
        return render(request, "topics/topic_detail.html", {
            "object": topic,
            "route": route_of(topic),
            "sync": sync,
            "live": live,
            "live_topic": topic_figures(live, topic.name) if live is not None else None,
            "ordering": ordering,
            "rescale": rescale,
            "bindings": [(b, bsync.get(b.pk)) for b in bindings],
            "grants": [(g, gsync.get(g.pk)) for g in grants],
            "open_applications": topic.lifecycle_applications.filter(state=State.PENDING),
            # change, retire and revoke are applications of the owning team: not offered to anybody else
            "owns": is_member(request.user, topic.team),
        })


# --- apps ---------------------------------------------------------------------------------


def _teams_of(user):
    return Team.objects.all() if has_role(user, ADMIN) else Team.objects.filter(members=user)


class AppListView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "topics.view_app"
    template_name = "topics/app_list.html"
    paginate_by = 50

    def get_queryset(self):
        qs = App.objects.select_related("team")
        if self.request.GET.get("mine") == "1":
            qs = qs.filter(team__in=_teams_of(self.request.user))
        return qs


class AppCreateView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """Create an app; the answer page shows its secret this once."""

    permission_required = "topics.add_app"
    raise_exception = True

    def get(self, request):
        form = AppForm(user=request.user, teams=_teams_of(request.user))
        return render(request, "topics/app_form.html", {"form": form})

    def post(self, request):
        form = AppForm(request.POST, user=request.user, teams=_teams_of(request.user))
        if form.is_valid():
            with errors_on(form):
                app, secret = actions.create_app(actor=request.user, **form.cleaned_data)
                return render(request, "topics/app_secret.html", {"object": app, "secret": secret, "created": True})
        return render(request, "topics/app_form.html", {"form": form}, status=400)


class AppDetailView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "topics.view_app"

    def get(self, request, app_id):
        app = get_object_or_404(App.objects.select_related("team"), app_id=app_id)
        may_change = request.user.has_perm("topics.change_app") and (
            has_role(request.user, ADMIN) or app.team.members.filter(pk=request.user.pk).exists())
        return render(request, "topics/app_detail.html", {
            "object": app, "sync": live_status_of("app", app), "may_change": may_change,
            "bindings": Binding.objects.filter(app=app).select_related("topic"),
            "grants": ProducerGrant.objects.filter(app=app).select_related("topic"),
        })


class AppRotateView(LoginRequiredMixin, View):
    raise_exception = True

    def post(self, request, app_id):
        app = get_object_or_404(App, app_id=app_id)
        raw = request.POST.get("old_secret_valid_for_s", str(actions.OLD_SECRET_DEFAULT_S))
        try:
            app, secret = actions.rotate_app_secret(actor=request.user, app=app,
                                                    old_secret_valid_for_s=int(raw) if raw.isdigit() else raw)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
            return redirect("topics:app-detail", app_id=app.app_id)
        return render(request, "topics/app_secret.html", {"object": app, "secret": secret, "created": False})


# --- topic applications ---------------------------------------------------------------------


class TopicApplicationFormView(governance.ApplicationFormView):
    model = TopicApplication
    form_class = TopicApplicationForm
    noun = "topic"


class TopicApplicationDetailView(governance.ApplicationDetailView):
    model = TopicApplication
    noun = "Topic"

    def fields(self, a):
        return [
            ("Name", a.name), ("Owning team", a.team.name), ("Environment", a.get_environment_display()),
            ("Cluster", a.cluster.name), ("Message types", ", ".join(a.message_types)),
            ("Expected peak", f"{a.expected_peak_mps:,} messages/s"),
            ("Maximum message size", f"{a.max_message_bytes:,} bytes"),
            ("Retention", f"{a.retention_hours} hours"), ("Storage level", a.get_storage_level_display()),
            ("Transactional", "yes" if a.transactional else "no"), ("Ordered", "yes" if a.ordered else "no"),
            ("Description", a.description or "—"), ("Reason", a.reason),
        ]
