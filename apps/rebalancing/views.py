"""The cluster page's rebalance buttons: start (with the brokers to empty), resume, abandon. Each posts, calls the
action and goes back to the cluster page, which shows the plan and the progress (apps.rebalancing.templatetags)."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views import View

from apps.clusters.models import Cluster
from apps.rebalancing import actions
from apps.rebalancing.models import Rebalance
from control_plane.errors import ActionError


def _back(cluster: Cluster):
    return redirect(reverse("clusters:detail", args=[cluster.name]) + "#rebalance")


class RebalanceStartView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "rebalancing.add_rebalance"
    raise_exception = True

    def post(self, request, name):
        cluster = get_object_or_404(Cluster, name=name)
        try:
            rebalance = actions.start_rebalance(actor=request.user, cluster=cluster,
                                                remove=request.POST.getlist("remove"))
        except ValidationError as exc:
            for m in [m for msgs in exc.message_dict.values() for m in msgs]:
                messages.error(request, m)
        else:
            messages.success(request, f"Rebalance #{rebalance.pk} started: {rebalance.total} steps.")
        return _back(cluster)


class _RebalanceActionView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "rebalancing.change_rebalance"
    raise_exception = True
    verb = ""

    def post(self, request, pk):
        rebalance = get_object_or_404(Rebalance.objects.select_related("cluster"), pk=pk)
        try:
            self.act(request.user, rebalance)
        except ActionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Rebalance #{rebalance.pk} {self.verb}.")
        return _back(rebalance.cluster)


class RebalanceResumeView(_RebalanceActionView):
    verb = "resumed"

    def act(self, user, rebalance):
        actions.resume_rebalance(actor=user, rebalance=rebalance)


class RebalanceAbandonView(_RebalanceActionView):
    verb = "abandoned"

    def act(self, user, rebalance):
        actions.abandon_rebalance(actor=user, rebalance=rebalance)
