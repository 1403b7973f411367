import re

from apps.audit.context import action_context

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class ActionContextMiddleware:
    """Give every request a request id (or keep a sane X-Request-ID) and mark its source."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _REQUEST_ID.match(incoming) else None
        source = "api" if request.path.startswith("/api/") else "web"
        with action_context(source, request_id) as ctx:
            request.request_id = ctx.request_id
            response = self.get_response(request)
        response["X-Request-ID"] = ctx.request_id
        return response
