"""Role permissions for the REST API, in one class (kept apart from api.py: DRF imports it at start-up)."""

from rest_framework import permissions


class RolePermission(permissions.DjangoModelPermissions):
    """Model permissions (held through role groups) decide every call, reads included.

    A view may name `action_perms = {"approve": "topics.approve_topicapplication"}` for its
    extra actions; otherwise the method decides (GET → view, POST → add, PUT/PATCH → change).
    """

    perms_map = {
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "OPTIONS": [],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
        "POST": ["%(app_label)s.add_%(model_name)s"],
        "PUT": ["%(app_label)s.change_%(model_name)s"],
        "PATCH": ["%(app_label)s.change_%(model_name)s"],
        "DELETE": ["%(app_label)s.delete_%(model_name)s"],
    }

    def has_permission(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return False
        extra = getattr(view, "action_perms", {}).get(getattr(view, "action", None))
        if extra is not None:
            return all(request.user.has_perm(p) for p in ([extra] if isinstance(extra, str) else extra))
        if getattr(view, "queryset", None) is None and not hasattr(view, "get_queryset"):
            return True  # plain APIViews declare their own checks
        return super().has_permission(request, view)
