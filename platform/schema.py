"""The OpenAPI schema's shared error answers (docs/security.md, "API contract").

Every view may answer with an error the exception handler (control_plane.api.exception_handler) shapes:
field errors (400), not authenticated (401), forbidden (403), not found (404), method not allowed (405),
not acceptable (406), a domain rule refused it (409), unsupported media type (415), throttled (429).
Rather than a decorator on each of the ~90 operations, this post-processing hook adds to every operation
the ones it does not list itself, with the two bodies the handler produces.
"""

from __future__ import annotations

DETAIL = "SwitchyardErrorDetail"
FIELDS = "SwitchyardFieldErrors"

_SCHEMAS = {
    DETAIL: {
        "type": "object",
        "description": "What went wrong and what to do instead.",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
    },
    FIELDS: {
        "type": "object",
        "description": "Messages by field (`non_field_errors` for the request as a whole), or a `detail`.",
        "additionalProperties": {},
    },
}

_ERRORS = {
    "400": ("Bad input: messages by field.", FIELDS),
    "401": ("Not authenticated: send `Authorization: Token <key>` (POST /api/v1/auth/token/).", DETAIL),
    "403": ("Authenticated, but this user's roles or teams do not allow it.", DETAIL),
    "404": ("No such object, or not visible to this user.", DETAIL),
    "405": ("This method is not allowed here.", DETAIL),
    "406": ("The Accept header asks for something other than JSON.", DETAIL),
    "409": ("A rule of the platform refused the action (the detail says which, and what to do).", DETAIL),
    "415": ("The body's content type is not JSON, a form or multipart.", DETAIL),
    "429": ("Too many requests: wait as long as Retry-After says.", DETAIL),
}



def add_error_responses(result, generator, request, public):
    """drf-spectacular post-processing hook: the shared error answers on every operation."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.update(_SCHEMAS)
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "patch", "delete", "head", "options"}:
                continue
            responses = operation.setdefault("responses", {})
            for code, (description, schema) in _ERRORS.items():
                if code in responses:
                    continue
                responses[code] = {
                    "description": description,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
                }
    return result
