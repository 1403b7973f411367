"""Web pages shared by every application kind: the form, the detail page with its workflow buttons,
the applicant's list and the approvers' queue. Kind modules subclass with their model, form and fields; the
model names the pages' URLs (`url_name`, wired by governance.routes.application_urls)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.governance import actions as workflow
from apps.governance import policy
from apps.governance.queue import awaiting_keys, find, load, of_applicant
from apps.governance.workflow import (
    SLOT_AS,
    SRE_APPROVAL_PERM,
    State,
    decidable_slots,
    slot_summary,
    waiting_for,
    why_not_approver,
)
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
        elif submit:
            add_policy_errors(form, request.user)
        return render(request, self.template_name, self._context(form, instance), status=400)


def add_policy_errors(form, applicant) -> None:
    """Beside a form's field errors, the policy's failures on what the form could read: the applicant fixes both
    in one round instead of meeting the policy only once the fields are right."""
    unknown = (set(form.fields) - set(form.cleaned_data)) | {NON_FIELD_ERRORS}
    report = policy.evaluate(form.instance, applicant=applicant, unknown=unknown)
    for field, messages_ in report.errors(applicant_reads=True).items():
        form.add_error(field if field in form.fields else None, messages_)


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
        return self.render_page(request, get_object_or_404(self.model, pk=pk))

    def render_page(self, request, application, status: int = 200, **extra):
        user = request.user
        records = recorded_sync([application]).get((application.kind, application.pk), [])
        sync = live_statuses(records) if records else []
        is_applicant = application.applicant_id == user.pk
        my_slots = decidable_slots(user, application)
        pending = application.state == State.PENDING
        report = application.policy_report or {}
        waiting = waiting_for(application) if pending else ""
        why_not = why_not_approver(user, application) if pending and not my_slots else ""
        return render(request, self.template_name, {
            **self.extra_context(application),
            "object": application,
            "noun": self.noun_of(application),
            "fields": self.fields(application),
            "slots": slot_summary(application),
            "decisions": application.decisions.select_related("actor"),
            # the policy's words follow the reader: said to the applicant, of the applicant to anyone else
            "policy_checks": [{**c, "text": policy.message_for(c, is_applicant)} for c in report.get("checks", [])],
            "whose": "Your application" if is_applicant else f"{application.applicant.username}'s application",
            "my_slots": my_slots,
            "my_slot_label": SLOT_AS[my_slots[0]] if my_slots else "",
            "waiting_for": waiting,
            "why_not": why_not if why_not != f"This application is waiting for {waiting}." else "",  # said above
            "is_applicant": is_applicant,
            "can_withdraw": is_applicant and application.state in (State.DRAFT, State.PENDING),
            "can_edit": is_applicant and application.state == State.DRAFT,
            "sync": sync,
            "verb_url": f"{self.model.url_name}-verb",
            "edit_url": f"{self.model.url_name}-edit",
            **extra,
        }, status=status)


VERBS = {"submit": workflow.submit, "withdraw": workflow.withdraw, "approve": workflow.approve,
         "reject": workflow.reject}


class ApplicationVerbView(LoginRequiredMixin, View):
    """POST submit | withdraw | approve | reject; each calls its action, which decides who may. A refusal shows on
    the application's page as an error (a missing comment under the comment box), and nothing changes."""

    raise_exception = True
    model = None
    detail_view = None  # the kind's ApplicationDetailView, to show the page again with a field error

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
            done = fn(**kwargs)
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}
            if "comment" in errors and self.detail_view is not None:
                application.refresh_from_db()
                return self.detail_view().render_page(request, application, status=400,
                                                      comment_errors=errors["comment"], comment=kwargs["comment"])
            text = " ".join(m for msgs in errors.values() for m in msgs)
            if verb == "submit":  # the draft's form shows each message at its field
                text += " Edit the draft to fix this, then submit it."
            messages.error(request, text)
        except ActionError as exc:
            messages.error(request, exc.message)
        except PermissionDenied as exc:
            if not role_allows(request.user, verb, application):
                raise  # not for this role at all: the refusal page
            # the role may, this application not (now): e.g. another approver filled the slot first
            messages.error(request, str(exc) or "You may not do this to this application.")
        else:
            messages.success(request, done_message(verb, done))
        return redirect(f"{self.model.url_name}-detail", pk=pk)


def role_allows(user, verb: str, application) -> bool:
    if verb in ("approve", "reject"):  # never one's own application
        return user.pk != application.applicant_id and (
            user.has_perm(application.approve_perm) or user.has_perm(SRE_APPROVAL_PERM))
    return user.has_perm(application.perm("change"))


def done_message(verb: str, application) -> str:
    if verb == "approve" and application.state == State.PENDING:
        return f"Your approval is recorded; {application.reference} now waits for {waiting_for(application)}."
    return {"submit": "Submitted for approval.", "withdraw": f"{application.reference} is withdrawn.",
            "approve": f"Approved: {application.reference} goes to provisioning now.",
            "reject": f"Rejected: {application.applicant.username} reads your comment."}[verb]


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
