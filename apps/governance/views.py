"""Web pages shared by every application kind: the form, the detail page with its workflow buttons,
the applicant's list and the approvers' queue. Kind modules subclass with their model, form and fields; the
model names the pages' URLs (`url_name`, wired by governance.routes.application_urls)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.governance import actions as workflow
from apps.governance import policy
from apps.governance.queue import awaiting_keys, find, load, of_applicant
from apps.governance.workflow import State, decidable_slots, slot_summary, why_not_approver
from apps.provisioning.status import live_statuses, recorded_sync
from control_plane.errors import ActionError
from control_plane.web import errors_on


class ApplicationFormView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """New application (no pk) or edit of a draft. "Submit" sends it for approval; "Save draft" keeps it."""

    raise_exception = True
    template_name = "governance/application_form.html"
    model = None
    form_class = None
    noun = ""  # "topic", "binding", "producer grant"

    def get_permission_required(self):
        return [self.model.perm("change" if "pk" in self.kwargs else "add")]

    def _instance(self):
        if "pk" not in self.kwargs:
            return None
        application = get_object_or_404(self.model, pk=self.kwargs["pk"])
        if application.applicant_id != self.request.user.pk:
            raise PermissionDenied("Only the applicant may edit this application.")
        if application.state != State.DRAFT:
            raise PermissionDenied("Only a draft can be edited.")
        return application

    def _context(self, form, instance):
        return {"form": form, "object": instance, "noun": self.noun, "rules": policy.describe(self.model.kind)}

    def get(self, request, **kwargs):
        instance = self._instance()
        form = self.form_class(user=request.user, instance=instance, initial=request.GET.dict())
        return render(request, self.template_name, self._context(form, instance))

    def post(self, request, **kwargs):
        instance = self._instance()
        form = self.form_class(request.POST, user=request.user, instance=instance)
        submit = request.POST.get("intent", "submit") != "draft"
        if form.is_valid():
            data = form.action_data()
            with errors_on(form):
                if instance is None:
                    application = workflow.create(actor=request.user, application=self.model(**data), submit=submit)
                else:
                    application = workflow.update(actor=request.user, application=instance, changes=data,
                                                  allowed=self.model.fields_asked)
                    if submit:
                        application = workflow.submit(actor=request.user, application=application)
                messages.success(request, "Submitted for approval." if submit else "Draft saved.")
                return redirect(application)
        return render(request, self.template_name, self._context(form, instance), status=400)


class ApplicationDetailView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """The application, its policy report, who approved what, its buttons, and its objects' sync state
    read from ZooKeeper now."""

    raise_exception = True
    template_name = "governance/application_detail.html"
    model = None
    noun = ""

    def get_permission_required(self):
        return [self.model.perm("view")]

    def fields(self, application) -> list[tuple[str, object]]:  # pragma: no cover - kinds implement
        raise NotImplementedError

    def noun_of(self, application) -> str:
        return self.noun

    def extra_context(self, application) -> dict:
        return {}

    def get(self, request, pk):
        application = get_object_or_404(self.model, pk=pk)
        user = request.user
        records = recorded_sync([application]).get((application.kind, application.pk), [])
        sync = live_statuses(records) if records else []
        is_applicant = application.applicant_id == user.pk
        my_slots = decidable_slots(user, application)
        return render(request, self.template_name, {
            **self.extra_context(application),
            "object": application,
            "noun": self.noun_of(application),
            "fields": self.fields(application),
            "slots": slot_summary(application),
            "decisions": application.decisions.select_related("actor"),
            "policy": application.policy_report,
            "my_slots": my_slots,
            "why_not": why_not_approver(user, application) if application.state == State.PENDING and not my_slots
            else "",
            "is_applicant": is_applicant,
            "can_withdraw": is_applicant and application.state in (State.DRAFT, State.PENDING),
            "can_edit": is_applicant and application.state == State.DRAFT,
            "sync": sync,
            "verb_url": f"{self.model.url_name}-verb",
            "edit_url": f"{self.model.url_name}-edit",
        })


VERBS = {"submit": workflow.submit, "withdraw": workflow.withdraw, "approve": workflow.approve,
         "reject": workflow.reject}


class ApplicationVerbView(LoginRequiredMixin, View):
    """POST submit | withdraw | approve | reject; each calls its action, which decides who may."""

    raise_exception = True
    model = None

    def post(self, request, pk, verb):
        fn = VERBS.get(verb)
        if fn is None:
            raise Http404("No such action.")
        if not request.user.has_perm(self.model.perm("view")):
            raise PermissionDenied("Your role does not allow this.")
        application = get_object_or_404(self.model, pk=pk)
        kwargs = {"actor": request.user, "application": application}
        if verb in ("approve", "reject"):
            kwargs["comment"] = request.POST.get("comment", "")
        try:
            fn(**kwargs)
        except ValidationError as exc:
            text = "; ".join(m for msgs in (exc.message_dict.values() if hasattr(exc, "error_dict")
                                            else [exc.messages]) for m in msgs)
            messages.error(request, text)
        except ActionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, {"submit": "Submitted for approval.", "withdraw": "Withdrawn.",
                                       "approve": "Approved.", "reject": "Rejected."}[verb])
        return redirect(f"{self.model.url_name}-detail", pk=pk)


class ApplicationLookupView(LoginRequiredMixin, View):
    """/applications/T-12/ (or /applications/12/): the application of that number, whatever its kind."""

    raise_exception = True

    def get(self, request, ref):
        application = find(ref)
        if application is None:
            raise Http404(f"No application {ref}.")
        if not request.user.has_perm(application.perm("view")):
            raise PermissionDenied("Your role does not allow reading this application.")
        return redirect(application.get_absolute_url())


class MyApplicationsView(LoginRequiredMixin, View):
    def get(self, request):
        return render(request, "governance/my_applications.html", {"applications": of_applicant(request.user)})


class ApprovalQueueView(LoginRequiredMixin, View):
    paginate_by = 50

    def get(self, request):
        page = Paginator(awaiting_keys(request.user), self.paginate_by).get_page(request.GET.get("page"))
        return render(request, "governance/approval_queue.html", {
            "applications": load(page.object_list), "page_obj": page, "is_paginated": page.has_other_pages()})
