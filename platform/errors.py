"""Errors the actions layer raises; views, the API and commands turn them into answers."""

from django.core.exceptions import PermissionDenied


class ActionError(Exception):
    """A domain rule refused the action; the message says what to do instead."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class MissingActor(TypeError):
    """An action was called without an actor: a programming error, never a way past a check."""


def require_actor(actor) -> None:
    if actor is None:
        raise MissingActor("an action was called with actor=None: pass the acting user, a service account's "
                           "user, or a control_plane.actors.SystemActor holding the permissions the job needs")


def require_perm(actor, perm: str) -> None:
    """Refuse unless the actor (a user, a service account or a system actor) holds perm; None raises."""
    require_actor(actor)
    if not actor.has_perm(perm):
        raise PermissionDenied(f"{getattr(actor, 'username', 'this user')} may not do this (needs {perm})")
