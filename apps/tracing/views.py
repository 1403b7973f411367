"""The auditor's tracing pages: search, a message's timeline, CSV export; index runs and schedule for SREs."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import DetailView, TemplateView

from apps.tracing import actions, schedule, timeline
from apps.tracing.export import export_messages
from apps.tracing.filtersets import TracedMessageFilterSet
from apps.tracing.forms import IndexScheduleForm
from apps.tracing.models import IndexRun, TracedMessage
from apps.tracing.queries import SEARCH_LIMIT, group_states, timeline_of
from control_plane.errors import ActionError
from control_plane.web import apply_validation_error


class TraceSearchView(LoginRequiredMixin, PermissionRequiredMixin, TemplateView):
    permission_required = "tracing.view_tracedmessage"
    raise_exception = True
    template_name = "tracing/search.html"

    def get_context_data(self, **kwargs):
        filterset = TracedMessageFilterSet(self.request.GET or None, queryset=TracedMessage.objects.defer("timeline"))
        results = None
        if filterset.has_criteria and filterset.is_valid():
            results = list(filterset.qs.order_by("-first_at", "-message_id")[: SEARCH_LIMIT + 1])
        return super().get_context_data(
            filterset=filterset, results=results[:SEARCH_LIMIT] if results else results,
            truncated=bool(results) and len(results) > SEARCH_LIMIT, limit=SEARCH_LIMIT, **kwargs)


class TraceExportView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "tracing.view_tracedmessage"
    raise_exception = True

    def get(self, request):
        filterset = TracedMessageFilterSet(request.GET, queryset=TracedMessage.objects.defer("timeline"))
        queryset = filterset.qs if filterset.is_valid() else TracedMessage.objects.none()
        return export_messages(queryset.order_by("-first_at", "-message_id"))


class MessageTraceView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "tracing.view_tracedmessage"
    raise_exception = True
    template_name = "tracing/message.html"
    model = TracedMessage
    slug_field = slug_url_kwarg = "message_id"
    context_object_name = "message"

    def get_context_data(self, **kwargs):
        events = timeline_of(self.object)
        state_by_group = group_states(self.object)
        message_state = self.object.transaction_state or ("stored" if self.object.stored_at else "published")
        return super().get_context_data(
            events=events, picture=timeline.layout(events, state_by_group, message_state), **kwargs)


class IndexRunsView(LoginRequiredMixin, PermissionRequiredMixin, TemplateView):
    permission_required = "tracing.view_indexrun"
    raise_exception = True
    template_name = "tracing/index_runs.html"

    def get_context_data(self, form=None, **kwargs):
        current = schedule.read_schedule()
        return super().get_context_data(
            runs=IndexRun.objects.select_related("requested_by")[:30], schedule=current,
            form=form or IndexScheduleForm(initial={
                "every_minutes": current.every_minutes or schedule.DEFAULT_EVERY_MINUTES, "enabled": current.enabled}),
            **kwargs)


class RebuildNowView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "tracing.start_indexrun"
    raise_exception = True

    def post(self, request):
        try:
            run = actions.request_index_build(actor=request.user)
        except ActionError as exc:
            messages.error(request, exc.message)
            return redirect("tracing:index")
        return redirect("tracing:run", pk=run.pk)


class ScheduleView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "tracing.change_index_schedule"
    raise_exception = True

    def post(self, request):
        form = IndexScheduleForm(request.POST)
        if form.is_valid():
            try:
                actions.update_index_schedule(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                apply_validation_error(form, exc)
            else:
                messages.info(request, "Schedule saved; Celery beat uses it from its next check.")
                return redirect("tracing:index")
        view = IndexRunsView()
        view.setup(request)
        return render(request, view.template_name, view.get_context_data(form=form), status=400)


class IndexRunView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "tracing.view_indexrun"
    raise_exception = True
    template_name = "tracing/index_run.html"
    context_object_name = "run"

    def get_object(self, queryset=None):
        return get_object_or_404(IndexRun.objects.select_related("requested_by"), pk=self.kwargs["pk"])
