"""Move pages: the list, one move with its steps and figures (refreshing itself while it runs), the start
form (also on the topic page, for SREs), roll back and resume."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import DetailView, ListView

from apps.moves import actions
from apps.moves.filtersets import TopicMoveFilterSet
from apps.moves.forms import MoveForm
from apps.moves.models import TopicMove
from apps.topics.models import Topic
from control_plane.errors import ActionError
from control_plane.web import errors_on


class MoveListView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "moves.view_topicmove"
    raise_exception = True
    template_name = "moves/list.html"
    paginate_by = 50

    def get_queryset(self):
        qs = TopicMove.objects.select_related("topic", "source", "target")
        return TopicMoveFilterSet(self.request.GET, queryset=qs).qs


class MoveDetailView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "moves.view_topicmove"
    raise_exception = True
    template_name = "moves/detail.html"
    context_object_name = "move"

    def get_object(self, queryset=None):
        return get_object_or_404(TopicMove.objects.select_related("topic", "source", "target"), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs):
        move = self.object
        steps = list(move.steps.all())
        for step in steps:  # a drain's bar: how much of the most it held is delivered
            figures = step.progress.get("figures") or {}
            step.bar_max = step.progress.get("peak") or 0
            step.bar_value = max(0, step.bar_max - figures.get("backlog", 0))  # a group's backlog counts in flight
        return super().get_context_data(steps=steps, rollback_refusal=actions.rollback_refusal(move), **kwargs)


class MoveStartView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """GET: the form for one topic (?topic=<id>); POST: start the move, or show the form with field errors."""

    permission_required = "moves.add_topicmove"
    raise_exception = True

    def get(self, request):
        topic = get_object_or_404(Topic, pk=request.GET.get("topic")) if str(request.GET.get("topic", "")).isdigit() \
            else None
        return self._page(request, MoveForm(topic=topic), topic)

    def post(self, request):
        form = MoveForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                move = actions.start_move(actor=request.user, topic=form.cleaned_data["topic"],
                                          target=form.cleaned_data["target"],
                                          dead_letters=form.cleaned_data["dead_letters"],
                                          client_follow_s=form.cleaned_data["client_follow_s"])
                messages.success(request, f"Move #{move.pk} started.")
                return redirect("moves:detail", pk=move.pk)
        return self._page(request, form, form.cleaned_data.get("topic") if hasattr(form, "cleaned_data") else None,
                          status=400)

    def _page(self, request, form, topic, status=200):
        return render(request, "moves/start.html", {"form": form, "topic": topic}, status=status)


class _MoveActionView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "moves.rollback_topicmove"
    raise_exception = True
    verb = ""

    def post(self, request, pk):
        move = get_object_or_404(TopicMove, pk=pk)
        try:
            self.act(request.user, move)
        except ActionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Move #{move.pk}: {self.verb}.")
        return redirect("moves:detail", pk=move.pk)


class MoveRollbackView(_MoveActionView):
    verb = "rolling back"

    def act(self, user, move):
        actions.rollback_move(actor=user, move=move)


class MoveResumeView(_MoveActionView):
    verb = "resumed"

    def act(self, user, move):
        actions.resume_move(actor=user, move=move)
