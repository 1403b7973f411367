import json

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.clusters.models import Cluster
from apps.provisioning import actions
from apps.provisioning.forms import ScheduleForm
from apps.provisioning.models import ReconcileRun, SyncState, SyncStatus
from apps.provisioning.reconcile import reconcile
from control_plane.web import errors_on


def _schedule_form(task):
    kwargs = json.loads(task.kwargs or "{}")
    return ScheduleForm(initial={"every_seconds": task.interval.every if task.interval else 60,
                                 "enabled": task.enabled, "repair": kwargs.get("repair", False)})


class DriftView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """Per cluster: the last reconcile run and the objects not in sync; SREs check, repair and reschedule."""

    permission_required = "provisioning.view_reconcilerun"

    def get(self, request, form=None, status=200):
        clusters = []
        for cluster in Cluster.objects.all():
            last = ReconcileRun.objects.filter(cluster=cluster).first()
            counts = {s: SyncState.objects.filter(cluster=cluster, state=s).count() for s in SyncStatus.values}
            clusters.append({"cluster": cluster, "last": last, "counts": counts})
        unsynced = (SyncState.objects.exclude(state=SyncStatus.SYNCED).select_related("cluster")
                    .order_by("cluster__name", "state", "path")[:200])
        task = actions.ensure_reconcile_schedule()
        return render(request, "provisioning/drift.html", {
            "clusters": clusters, "unsynced": unsynced, "task": task,
            "schedule_form": form or _schedule_form(task),
        }, status=status)


class ReconcileView(LoginRequiredMixin, View):
    """POST: reconcile one cluster now (repair=1 also fixes what it finds); the action checks the role."""

    raise_exception = True

    def post(self, request, name):
        cluster = get_object_or_404(Cluster, name=name)
        run = reconcile(cluster, repair=request.POST.get("repair") == "1", actor=request.user)
        if not run.reachable:
            messages.error(request, f"ZooKeeper of {cluster.name} is unreachable: {run.error}")
        return redirect("provisioning:run", pk=run.pk)


class RunDetailView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "provisioning.view_reconcilerun"

    def get(self, request, pk):
        run = get_object_or_404(ReconcileRun.objects.select_related("cluster", "requested_by"), pk=pk)
        return render(request, "provisioning/run_detail.html", {"object": run})


class ScheduleView(LoginRequiredMixin, View):
    raise_exception = True

    def post(self, request):
        form = ScheduleForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                actions.set_reconcile_schedule(actor=request.user, **form.cleaned_data)
                messages.success(request, "Reconcile schedule saved; beat picks it up without a restart.")
                return redirect("provisioning:drift")
        view = DriftView()
        view.setup(request)
        return view.get(request, form=form, status=400)
