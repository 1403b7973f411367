"""The tracing pages: search, a message's timeline, CSV export (developers: their teams' topics; auditors and
SREs: all); index runs and schedule for SREs."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import DetailView, TemplateView

from apps.tracing import actions, schedule, timeline
from apps.tracing.export import export_messages
from apps.tracing.filtersets import TracedMessageFilterSet
from apps.tracing.forms import IndexScheduleForm
from apps.tracing.models import IndexRun, TracedMessage
from apps.tracing.paging import NEWEST_FIRST, InvalidCursor, page_of
from apps.tracing.queries import group_states, may_trace, timeline_of, visible_messages
from control_plane.errors import ActionError
from control_plane.web import apply_validation_error


class TraceSearchView(LoginRequiredMixin, PermissionRequiredMixin, TemplateView):
    permission_required = "tracing.view_tracedmessage"
    raise_exception = True
    template_name = "tracing/search.html"
    page_size = 50

    def get(self, request, *args, **kwargs):
        context = self.get_context_data(**kwargs)
        return self.render_to_response(context, status=400 if context["cursor_error"] else 200)

    def get_context_data(self, **kwargs):
        filterset = TracedMessageFilterSet(self.request.GET or None, queryset=self.searchable())
        page, cursor_error = None, ""
        if filterset.has_criteria and filterset.is_valid():
            try:
                page = page_of(filterset.qs, self.request.GET.get("cursor"), self.page_size)
            except InvalidCursor as exc:
                cursor_error = str(exc)
        query = self.request.GET.copy()
        query.pop("cursor", None)
        return super().get_context_data(
            filterset=filterset, page=page, results=page.results if page else None, cursor_error=cursor_error,
            query=query.urlencode(), all_topics=self.request.user.has_perm("tracing.trace_all_topics"), **kwargs)

    def searchable(self):
        return visible_messages(self.request.user, TracedMessage.objects.defer("timeline"))


class TraceExportView(TraceSearchView):
    def get(self, request, *args, **kwargs):
        filterset = TracedMessageFilterSet(request.GET, queryset=self.searchable())
        queryset = filterset.qs if filterset.is_valid() else TracedMessage.objects.none()
        return export_messages(queryset.order_by(*NEWEST_FIRST))


class MessageTraceView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "tracing.view_tracedmessage"
    raise_exception = True
    template_name = "tracing/message.html"
    model = TracedMessage
    slug_field = slug_url_kwarg = "message_id"
    context_object_name = "message"

    def get_object(self, queryset=None):
        message = super().get_object(queryset)
        if not may_trace(self.request.user, message):
            raise PermissionDenied("This message is on a topic none of your teams owns.")
        return message

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
