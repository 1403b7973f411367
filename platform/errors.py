"""Errors the actions layer raises; views, the API and commands turn them into answers."""

from django.core.exceptions import PermissionDenied


class ActionError(Exception):
    """A domain rule refused the action; the message says what to do instead."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def require_perm(actor, perm: str) -> None:
    """Refuse unless the acting user holds perm. `actor=None` is the system itself."""
    if actor is None:
        return
    if not actor.has_perm(perm):
        raise PermissionDenied(f"{getattr(actor, 'username', 'this user')} may not do this (needs {perm})")
