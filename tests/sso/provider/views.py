"""The provider's claims (a `groups` claim from the user's Django groups) and its /directory/ endpoints, through
which the tests set users, groups and the Switchyard client (PUT with `Authorization: Bearer <admin token>`)."""

import json
import secrets

from django.contrib.auth.models import Group, User
from django.http import HttpResponseForbidden, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods
from oauth2_provider.models import get_application_model
from oauth2_provider.oauth2_validators import OAuth2Validator

from broker_core.secret_source import read_secret


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = None  # every claim, whatever the scopes

    def get_additional_claims(self, request):
        user = request.user
        return {"preferred_username": user.username, "email": user.email, "given_name": user.first_name,
                "family_name": user.last_name, "groups": sorted(user.groups.values_list("name", flat=True))}

    # prompt=none (a relying party checking a session again): the authorization view answers error=login_required
    # itself to a browser with no session at the provider; a signed-in user passes silently, since the client
    # needs no approval (skip_authorization)
    def validate_silent_login(self, request):
        return True

    def validate_silent_authorization(self, request):
        return True


def _authorized(request) -> bool:
    expected = f"Bearer {read_secret('OIDC_PROVIDER_ADMIN_TOKEN')}"
    return secrets.compare_digest(request.headers.get("Authorization", ""), expected)


@csrf_exempt
@require_http_methods(["PUT"])
def put_user(request, username):
    """{"password", "email", "groups": [...], "active": bool}: create or replace the user."""
    if not _authorized(request):
        return HttpResponseForbidden("admin token required")
    body = json.loads(request.body)
    user, _ = User.objects.get_or_create(username=username)
    user.email = body.get("email", "")
    user.first_name = body.get("first_name", "")
    user.is_active = body.get("active", True)
    if body.get("password") and not user.check_password(body["password"]):
        user.set_password(body["password"])  # only when it changes: a new hash ends the user's sessions
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in body.get("groups", [])])
    return JsonResponse({"sub": str(user.pk), "username": user.username})


@csrf_exempt
@require_http_methods(["PUT"])
def put_client(request):
    """{"client_id", "client_secret", "redirect_uris", "post_logout_redirect_uris"}: a confidential client
    using the authorization code flow, which the provider's users need not approve."""
    if not _authorized(request):
        return HttpResponseForbidden("admin token required")
    body = json.loads(request.body)
    model = get_application_model()
    model.objects.filter(client_id=body["client_id"]).delete()
    model.objects.create(
        client_id=body["client_id"], client_secret=body["client_secret"], name="Switchyard",
        client_type=model.CLIENT_CONFIDENTIAL, authorization_grant_type=model.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(body["redirect_uris"]), post_logout_redirect_uris=" ".join(body["post_logout_redirect_uris"]),
        algorithm=model.RS256_ALGORITHM, skip_authorization=True)
    return JsonResponse({"client_id": body["client_id"]})
