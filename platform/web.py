"""Shared pieces of the web UI and the admin that keep their writes in the actions layer."""

from __future__ import annotations

from contextlib import contextmanager

from django.contrib import admin
from django.core.exceptions import ValidationError

from control_plane.errors import ActionError


def apply_validation_error(form, error: ValidationError) -> None:
    """Put an action's validation error on the form's fields (or on the form as a whole)."""
    if hasattr(error, "error_dict"):
        for field, errors in error.error_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, error)


@contextmanager
def errors_on(form):
    """Around an action called with a form's data: its refusal lands on the form and the view goes on to show the
    form again (a ValidationError on its fields, an ActionError on its field or the form as a whole)."""
    try:
        yield
    except ValidationError as exc:
        apply_validation_error(form, exc)
    except ActionError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)


class ActionAdmin(admin.ModelAdmin):
    """A ModelAdmin whose saves call the actions layer; deletes are not offered."""

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        data = {name: form.cleaned_data[name] for name in form.cleaned_data if name in self.get_fields(request, obj)}
        if change:
            original = type(obj).objects.get(pk=obj.pk)
            saved = self.update_via_action(request, original, data)
        else:
            saved = self.create_via_action(request, obj, data)
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})

    def save_related(self, request, form, formsets, change):
        # m2m fields are written by the action itself
        pass

    def create_via_action(self, request, obj, data):  # pragma: no cover
        raise NotImplementedError

    def update_via_action(self, request, obj, data):  # pragma: no cover
        raise NotImplementedError
