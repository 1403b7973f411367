"""Web pages of lifecycle applications: the form for each (target, operation), the application page with its diff,
the lookup of any application by its number, and the SRE's drop-backlog page of a retired topic's binding."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.bindings.models import Binding, ProducerGrant
from apps.governance import actions as workflow
from apps.governance import policy
from apps.governance import views as governance
from apps.governance.workflow import State
from apps.lifecycle import actions, retirement
from apps.lifecycle.choices import NOUNS, Operation, Target
from apps.lifecycle.forms import BindingChangeForm, DropBacklogForm, ReasonForm, TopicChangeForm
from apps.lifecycle.models import TARGET_FIELDS, LifecycleApplication
from apps.topics.models import App, Topic
from control_plane.web import errors_on

FORMS = {(Target.TOPIC, Operation.CHANGE): TopicChangeForm, (Target.BINDING, Operation.CHANGE): BindingChangeForm}
TARGETS = {
    Target.TOPIC: (Topic.objects.select_related("team", "cluster"), "pk"),
    Target.BINDING: (Binding.objects.select_related("topic__team", "topic__cluster", "app"), "pk"),
    Target.GRANT: (ProducerGrant.objects.select_related("topic__team", "topic__cluster", "app"), "pk"),
    Target.APP: (App.objects.select_related("team"), "app_id"),
}
INTROS = {
    Operation.CHANGE: "The current values are filled in: change what should change. Approvers see the change as "
                      "before → after.",
    Operation.RETIRE: "Once approved, publishes are refused at once; bindings stay until their backlog is consumed "
                      "(or an SRE drops it); the data is deleted retention hours after retirement, once no binding "
                      "is left. The name stays taken until then.",
    Operation.REMOVE: "Once approved, the binding leaves ZooKeeper and the group stops receiving messages.",
    Operation.REVOKE: "Once approved, the app may no longer publish on the topic.",
    Operation.DEACTIVATE: "Once approved, brokers refuse the app's connections; its bindings and grants stay.",
    Operation.ACTIVATE: "Once approved, the app may connect again.",
}


class LifecycleFormView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """Apply to change, retire, remove, revoke, deactivate or reactivate (`target_kind`, `operation` from the URL
    configuration), or edit such a draft (`pk`)."""

    raise_exception = True
    template_name = "governance/application_form.html"
    target_kind = operation = ""

    def get_permission_required(self):
        return [LifecycleApplication.perm("change" if "pk" in self.kwargs else "add")]

    def _setup(self):
        """(draft or None, target kind, operation, target)."""
        if "pk" in self.kwargs:
            draft = get_object_or_404(LifecycleApplication, pk=self.kwargs["pk"])
            if draft.applicant_id != self.request.user.pk:
                raise PermissionDenied("Only the applicant may edit this application.")
            if draft.state != State.DRAFT:
                raise PermissionDenied("Only a draft can be edited.")
            return draft, draft.target_kind, draft.operation, draft.target
        queryset, key = TARGETS[self.target_kind]
        target = get_object_or_404(queryset, **{key: self.kwargs["key"]})
        return None, self.target_kind, self.operation, target

    def _form(self, kind, operation, target, draft, data=None):
        form_class = FORMS.get((kind, operation), ReasonForm)
        initial = {"reason": draft.reason} if draft else {}
        return form_class(data, target=target, changes=draft.changes if draft else None, initial=initial)

    def _render(self, form, draft, kind, operation, target, status=200):
        noun = NOUNS[(kind, operation)]
        name = LifecycleApplication(operation=operation, target_kind=kind, **{TARGET_FIELDS[kind]: target})
        return render(self.request, self.template_name, {
            "form": form, "object": draft, "noun": noun, "heading": f"{noun.capitalize()}: {name.target_name()}",
            "intro": INTROS[operation], "rules": policy.describe(f"{kind}-{operation}")}, status=status)

    def get(self, request, **kwargs):
        draft, kind, operation, target = self._setup()
        return self._render(self._form(kind, operation, target, draft), draft, kind, operation, target)

    def post(self, request, **kwargs):
        draft, kind, operation, target = self._setup()
        form = self._form(kind, operation, target, draft, request.POST)
        submit = request.POST.get("intent", "submit") != "draft"
        if form.is_valid():
            data = {"changes": form.changes(), "reason": form.cleaned_data["reason"]}
            with errors_on(form):
                if draft is None:
                    application = workflow.create(actor=request.user, submit=submit, application=LifecycleApplication(
                        operation=operation, **{TARGET_FIELDS[kind]: target}, **data))
                else:
                    application = workflow.update(actor=request.user, application=draft, changes=data,
                                                  allowed=LifecycleApplication.fields_asked)
                    if submit:
                        application = workflow.submit(actor=request.user, application=application)
                messages.success(request, "Submitted for approval." if submit else "Draft saved.")
                return redirect(application)
        return self._render(form, draft, kind, operation, target, status=400)


class LifecycleDetailView(governance.ApplicationDetailView):
    model = LifecycleApplication

    def noun_of(self, application) -> str:
        return application.kind_label.capitalize()

    def fields(self, a):
        revisions = f"{a.base_revision}" + (f" → {a.applied_revision}" if a.applied_revision else "")
        return [("What", a.kind_label), ("Of", a.target_name()), ("Approving team", a.team.name if a.team else "—"),
                ("Target revision", revisions if a.base_revision else "—"), ("Reason", a.reason)]

    def extra_context(self, application) -> dict:
        return {"diff": application.diff, "target_url": _target_url(application)}


def _target_url(application) -> str:
    target = application.target
    if application.target_kind == Target.GRANT:
        return target.topic.get_absolute_url()
    if application.target_kind == Target.APP:
        return f"/apps/{target.app_id}/"
    return target.get_absolute_url()


class DropBacklogView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """An SRE drops a retired topic's binding with its backlog, confirming the number of messages read now."""

    raise_exception = True
    permission_required = actions.DROP_BACKLOG_PERM
    template_name = "lifecycle/drop_backlog.html"

    def _render(self, binding, form, drain, status=200):
        return render(self.request, self.template_name, {
            "object": binding, "form": form, "drain": drain,
            "figures": drain.group(binding.group) if drain else None}, status=status)

    def get(self, request, pk):
        binding = get_object_or_404(Binding.objects.select_related("topic__cluster", "app"), pk=pk)
        return self._render(binding, DropBacklogForm(), retirement.drain_of(binding.topic))

    def post(self, request, pk):
        binding = get_object_or_404(Binding.objects.select_related("topic__cluster", "app"), pk=pk)
        form = DropBacklogForm(request.POST)
        drain = retirement.drain_of(binding.topic)
        if form.is_valid():
            if not drain.complete:
                form.add_error(None, "The brokers' backlog could not be read (" + "; ".join(drain.errors)
                                     + "); it is read again when you retry.")
            else:
                figures = drain.group(binding.group)
                with errors_on(form):
                    actions.drop_backlog(actor=request.user, binding=binding,
                                         backlog=figures["backlog"],
                                         confirmed=form.cleaned_data["confirm_backlog"])
                    messages.success(request, f"Binding {binding.group} dropped with its backlog.")
                    return redirect("topics:detail", pk=binding.topic_id)
        return self._render(binding, form, drain, status=400)
