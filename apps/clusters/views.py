from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import DetailView, ListView

from apps.bindings.models import Binding
from apps.clusters import actions
from apps.clusters.broker_stats import read_cluster_stats
from apps.clusters.filtersets import ClusterFilterSet
from apps.clusters.forms import ClusterForm
from apps.clusters.models import Cluster
from apps.clusters.series import RANGES, Prometheus, PrometheusUnavailable, Scope, read_series
from apps.clusters.zookeeper import read_health
from apps.provisioning.reconcile import latest_run
from apps.topics.models import Topic
from control_plane.web import errors_on


class ClusterListView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "clusters.view_cluster"
    template_name = "clusters/cluster_list.html"
    paginate_by = 50

    def get_queryset(self):
        self.filterset = ClusterFilterSet(self.request.GET, queryset=Cluster.objects.all())
        return self.filterset.qs

    def get_context_data(self, **kwargs):
        return super().get_context_data(filterset=self.filterset, **kwargs)


class ClusterDetailView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "clusters.view_cluster"
    template_name = "clusters/cluster_detail.html"
    model = Cluster
    slug_field = slug_url_kwarg = "name"

    def get_context_data(self, **kwargs):
        health = read_health(self.object)
        run = latest_run(self.object)
        return super().get_context_data(health=health, live=read_cluster_stats(health),
                                        drift_run=run if run is not None and run.unrepaired else None, **kwargs)


class ClusterFormView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """Create (no name in the URL) or edit a cluster; the write goes through the actions layer."""

    template_name = "clusters/cluster_form.html"
    raise_exception = True

    def get_permission_required(self):
        return ["clusters.change_cluster" if "name" in self.kwargs else "clusters.add_cluster"]

    def _instance(self):
        return get_object_or_404(Cluster, name=self.kwargs["name"]) if "name" in self.kwargs else None

    def get(self, request, **kwargs):
        instance = self._instance()
        return render(request, self.template_name, {"form": ClusterForm(instance=instance), "object": instance})

    def post(self, request, **kwargs):
        instance = self._instance()
        form = ClusterForm(request.POST, instance=instance)
        if form.is_valid():
            data = {f: form.cleaned_data[f] for f in form.Meta.fields}
            with errors_on(form):
                if instance is None:
                    cluster = actions.create_cluster(actor=request.user, **data)
                else:
                    cluster = actions.update_cluster(actor=request.user, cluster=instance, **data)
                return redirect("clusters:detail", name=cluster.name)
        return render(request, self.template_name, {"form": form, "object": instance}, status=400)


class SeriesView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """GET ?range=15m|1h|6h|24h: the plots of a page as JSON (apps/clusters/series.py runs fixed queries).

    Who may call: whoever may read the page the plots are on (`permission_required` of each subclass), checked
    before anything of the request is read: 403 otherwise. A range not in RANGES is a 400 naming the field;
    Prometheus not answering is a 503 whose message the page shows in place of the plots."""

    raise_exception = True  # JSON callers get 403, not a redirect to the login page
    http_method_names = ["get"]

    def scope(self) -> Scope:
        raise NotImplementedError

    def get(self, request, **kwargs):
        range_key = request.GET.get("range", "1h")
        if range_key not in RANGES:
            return JsonResponse({"error": "invalid", "message": f"range must be one of {', '.join(RANGES)}",
                                 "errors": {"range": [f"{range_key[:20]!r} is not one of {', '.join(RANGES)}"]}},
                                status=400)
        scope = self.scope()
        try:
            with Prometheus() as prometheus:
                return JsonResponse({"scope": vars(scope), **read_series(prometheus, scope, range_key)})
        except PrometheusUnavailable as exc:
            return JsonResponse({"error": "prometheus_unavailable", "message": str(exc)}, status=503)


class ClusterSeriesView(SeriesView):
    permission_required = "clusters.view_cluster"

    def scope(self) -> Scope:
        return Scope(get_object_or_404(Cluster, name=self.kwargs["name"]).name)


class TopicSeriesView(SeriesView):
    permission_required = "topics.view_topic"

    def scope(self) -> Scope:
        topic = get_object_or_404(Topic.objects.select_related("cluster"), pk=self.kwargs["pk"])
        return Scope(topic.cluster.name, topic.name)


class BindingSeriesView(SeriesView):
    permission_required = "bindings.view_binding"

    def scope(self) -> Scope:
        binding = get_object_or_404(Binding.objects.select_related("topic__cluster"), pk=self.kwargs["pk"])
        return Scope(binding.topic.cluster.name, binding.topic.name, binding.group)
