"""The REST API's shared pieces: role permissions in one class, JSON errors, action-backed viewsets."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status, viewsets
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from control_plane.errors import ActionError

log = logging.getLogger(__name__)


def _field_errors(error: DjangoValidationError) -> dict:
    if hasattr(error, "error_dict"):
        return {("non_field_errors" if k == "__all__" else k): [str(m) for m in v]
                for k, v in error.message_dict.items()}
    return {"non_field_errors": list(error.messages)}


def exception_handler(exc, context):
    """Every error is JSON: field errors for validation, a `detail` otherwise, never a 500 for bad input."""
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(_field_errors(exc))
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, ActionError):
        body = {exc.field: [exc.message]} if exc.field else {"detail": exc.message}
        return Response(body, status=status.HTTP_409_CONFLICT if not exc.field else status.HTTP_400_BAD_REQUEST)
    elif isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, list):
        exc = exceptions.ValidationError({"non_field_errors": exc.detail})  # the 400 body is always an object
    response = drf_exception_handler(exc, context)
    if response is None:  # not an API error: a bug. Log it; the caller gets no detail of it, only the request id
        request_id = getattr(context.get("request"), "request_id", "")
        log.error("unhandled error in an API view", exc_info=exc, extra={"request_id": request_id})
        response = Response({"detail": f"Internal server error. Quote request id {request_id} when you report it."},
                            status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if context.get("request") is not None:
        response["X-Request-ID"] = getattr(context["request"], "request_id", "")
    return response


class ActionViewSet(viewsets.GenericViewSet):
    """A viewset whose writes go through the actions layer.

    Subclasses implement `create_via_action(data)` and `update_via_action(instance, data)`
    returning the saved object; the serializer only validates shape.
    """

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        obj = self.create_via_action(serializer.validated_data)
        return Response(self.get_serializer(obj).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        partial = kwargs.pop("partial", False)
        instance = self.get_object()
        serializer = self.get_serializer(instance, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        obj = self.update_via_action(instance, serializer.validated_data)
        return Response(self.get_serializer(obj).data)

    def partial_update(self, request, *args, **kwargs):
        kwargs["partial"] = True
        return self.update(request, *args, **kwargs)

    def create_via_action(self, data):  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def update_via_action(self, instance, data):  # pragma: no cover - subclasses implement
        raise NotImplementedError
