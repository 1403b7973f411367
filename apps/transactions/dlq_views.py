"""The dead-letter browser and the group position reset pages (docs/transactions.md "Dead-letter browser").

Reached from a binding's page, a topic's bindings and the cluster page (`dead-letters/?cluster=`). The views
read and call actions; who may do what is decided in `apps.transactions.dead_letters` (may_browse /
may_manage) and enforced again by the actions.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.bindings.models import Binding
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.topics.models import Topic
from apps.transactions import actions
from apps.transactions.broker_admin import BrokerAdminError
from apps.transactions.dead_letters import DeadLetterQuery, may_browse, may_manage, read_page
from apps.transactions.forms import DeadLetterActionForm, DeadLetterFilterForm, GroupResetForm
from apps.transactions.roles import BROWSE
from control_plane.web import errors_on


def _binding(request, pk: int, manage: bool = False) -> Binding:
    binding = get_object_or_404(Binding.objects.select_related("topic__team", "topic__cluster", "app"), pk=pk,
                                status="active")
    allowed = may_manage(request.user, binding.topic) if manage else may_browse(request.user, binding.topic)
    if not allowed:
        raise PermissionDenied("Only SREs, auditors (to look) and the developers of the topic's team may see the "
                               "dead letters of this group; only SREs and the team's developers may change them.")
    return binding


def _query(form: DeadLetterFilterForm) -> DeadLetterQuery:
    data = form.cleaned_data
    return DeadLetterQuery(data.get("message_type") or "", data.get("key") or "", data.get("business_id") or "",
                           data.get("since"), data.get("until"))


class DeadLetterIndexView(LoginRequiredMixin, View):
    """The groups whose dead letters the user may browse (of one cluster with ?cluster=)."""

    def get(self, request):
        if not request.user.has_perm(BROWSE):
            raise PermissionDenied("Your role does not browse dead letters.")
        bindings = Binding.objects.filter(status="active").select_related("topic__team", "topic__cluster")
        cluster = request.GET.get("cluster")
        if cluster:
            bindings = bindings.filter(topic__cluster__name=cluster)
        bindings = [b for b in bindings.order_by("topic__name", "group") if may_browse(request.user, b.topic)]
        return render(request, "transactions/dead_letter_index.html", {"bindings": bindings, "cluster": cluster})


class DeadLetterBrowserView(LoginRequiredMixin, View):
    def get(self, request, pk):
        return self.show(request, _binding(request, pk), DeadLetterFilterForm(request.GET or None))

    def show(self, request, binding: Binding, filters: DeadLetterFilterForm, action_form=None, status: int = 200):
        page, error = None, ""
        valid = filters.is_valid() if filters.is_bound else True
        if valid:
            query = _query(filters) if filters.is_bound else DeadLetterQuery()
            try:
                page = read_page(binding.topic.cluster, binding.topic.name, binding.group, query,
                                 after=request.GET.get("after") or None)
            except (BrokerAdminError, ZooKeeperUnreachable) as exc:
                error = f"The brokers could not be read: {exc}"
        params = request.GET.copy()
        params.pop("after", None)
        manage = may_manage(request.user, binding.topic)
        targets = Topic.objects.filter(team=binding.topic.team, cluster=binding.topic.cluster, status="active") \
            .exclude(pk=binding.topic.pk).order_by("name") if manage else []
        return render(request, "transactions/dead_letters.html", {
            "binding": binding, "filters": filters, "page": page, "error": error, "manage": manage,
            "targets": targets, "action_form": action_form, "filter_query": params.urlencode(),
            "filter_values": {k: v for k, v in params.items() if k in DeadLetterFilterForm.base_fields},
        }, status=status)

    def post(self, request, pk):
        binding = _binding(request, pk, manage=True)
        form = DeadLetterActionForm(request.POST)
        ids = request.POST.getlist("message_ids")
        if form.is_valid():
            data = form.cleaned_data
            topic, cluster = binding.topic, binding.topic.cluster
            everything = data["scope"] == "all"
            with errors_on(form):
                if data["operation"] == "copy":
                    result = actions.copy_dead_letters(actor=request.user, cluster=cluster, topic=topic.name,
                                                       group=binding.group, message_ids=ids,
                                                       to_topic=data["to_topic"])
                    messages.success(request, f"{len(result['copied'])} copied to {data['to_topic']}, "
                                              f"{len(result['skipped'])} skipped.")
                    return redirect("transactions:dead-letters", pk=binding.pk)
                query = _query(form)
                run = actions.request_redrive(
                    actor=request.user, cluster=cluster, topic=topic.name, group=binding.group,
                    operation=data["operation"], message_ids=[] if everything else ids, all_matching=everything,
                    since=query.since if everything else None, until=query.until if everything else None,
                    filters=query.stored() if everything else None)
                return redirect("transactions:redrive", pk=run.pk)
        filters = DeadLetterFilterForm({k: v for k, v in request.POST.items() if k in DeadLetterFilterForm.base_fields})
        return self.show(request, binding, filters, action_form=form, status=400)


class GroupResetView(LoginRequiredMixin, View):
    def get(self, request, pk):
        binding = _binding(request, pk, manage=True)
        return render(request, "transactions/group_reset.html", {"binding": binding, "form": GroupResetForm()})

    def post(self, request, pk):
        binding = _binding(request, pk, manage=True)
        form = GroupResetForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                result = actions.reset_group_position(actor=request.user, cluster=binding.topic.cluster,
                                                      topic=binding.topic.name, group=binding.group,
                                                      to=form.cleaned_data["to"])
                messages.success(request, f"Position of {binding.group} reset: {result['skipped']} messages stored "
                                          f"before {result['to']} skipped.")
                return redirect("bindings:detail", pk=binding.pk)
        return render(request, "transactions/group_reset.html", {"binding": binding, "form": form}, status=400)

