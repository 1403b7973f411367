"""The transaction governance view, its drill-down and dead-letter re-drive pages (their figures: /metrics,
control_plane.metrics)."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import DetailView, TemplateView

from apps.topics.actions import set_app_check_hosts, set_app_check_url
from apps.topics.models import App
from apps.transactions import actions, queries
from apps.transactions.choices import TxState
from apps.transactions.filtersets import PreparedMessageFilterSet
from apps.transactions.forms import CheckUrlForm, RedriveForm
from apps.transactions.models import Redrive
from control_plane.web import errors_on

MESSAGE_LIMIT = 200


class TxOverviewView(LoginRequiredMixin, PermissionRequiredMixin, TemplateView):
    permission_required = "transactions.view_preparedmessage"
    raise_exception = True
    template_name = "transactions/overview.html"

    def get_context_data(self, **kwargs):
        rows = queries.summary(queries.visible_messages(self.request.user))
        return super().get_context_data(rows=rows, unresolved=sum(r["unresolved"] for r in rows), **kwargs)


class TxMessagesView(LoginRequiredMixin, PermissionRequiredMixin, TemplateView):
    """The messages behind a row of the overview (by default the unresolved ones), each with its checks."""

    permission_required = "transactions.view_preparedmessage"
    raise_exception = True
    template_name = "transactions/messages.html"

    def get_context_data(self, **kwargs):
        data = self.request.GET.copy()
        data.setdefault("state", TxState.UNRESOLVED)
        filterset = PreparedMessageFilterSet(data, queryset=queries.visible_messages(self.request.user))
        qs = filterset.qs if filterset.is_valid() else filterset.queryset.none()
        found = list(qs.select_related("cluster").prefetch_related("checks").order_by("prepared_at", "id")
                     [:MESSAGE_LIMIT + 1])
        return super().get_context_data(filterset=filterset, found=found[:MESSAGE_LIMIT],
                                        truncated=len(found) > MESSAGE_LIMIT, limit=MESSAGE_LIMIT, **kwargs)


class RedriveListView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "transactions.view_redrive"
    raise_exception = True

    def get(self, request, form=None, status=200):
        return render(request, "transactions/redrives.html", {
            "runs": Redrive.objects.select_related("cluster", "requested_by")[:50],
            "form": form or (RedriveForm() if request.user.has_perm("transactions.add_redrive") else None),
        }, status=status)

    def post(self, request):
        if not request.user.has_perm("transactions.add_redrive"):
            return render(request, "403.html", {"message": "Only SREs re-drive dead letters."}, status=403)
        form = RedriveForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                run = actions.request_redrive(actor=request.user, **form.cleaned_data)
                return redirect("transactions:redrive", pk=run.pk)
        return self.get(request, form=form, status=400)


class RedriveDetailView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "transactions.view_redrive"
    raise_exception = True
    template_name = "transactions/redrive.html"
    context_object_name = "run"

    def get_object(self, queryset=None):
        return get_object_or_404(Redrive.objects.select_related("cluster", "requested_by"), pk=self.kwargs["pk"])


class AppCheckUrlView(LoginRequiredMixin, View):
    raise_exception = True

    def post(self, request, app_id):
        app = get_object_or_404(App, app_id=app_id)
        form = CheckUrlForm(request.POST)
        if form.is_valid():
            try:
                set_app_check_url(actor=request.user, app=app, check_url=form.cleaned_data["check_url"])
            except ValidationError as exc:
                messages.error(request, "; ".join(exc.messages))
            else:
                messages.success(request, f"Check URL of {app.app_id} saved.")
        else:
            messages.error(request, "; ".join(form.errors.get("check_url", ["Not a valid URL."])))
        return redirect("topics:app-detail", app_id=app.app_id)


class AppCheckHostsView(LoginRequiredMixin, View):
    raise_exception = True

    def post(self, request, app_id):
        app = get_object_or_404(App, app_id=app_id)
        hosts = [h for h in request.POST.get("check_hosts", "").replace("\n", ",").split(",") if h.strip()]
        try:
            set_app_check_hosts(actor=request.user, app=app, hosts=hosts)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        else:
            messages.success(request, f"Allowed check hosts of {app.app_id} saved.")
        return redirect("topics:app-detail", app_id=app.app_id)

