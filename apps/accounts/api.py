from axes.models import AccessAttempt
from django.contrib.auth import authenticate
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import lockouts, token_actions
from apps.accounts.models import ApiToken, ServiceAccount, Team
from apps.accounts.roles import ROLES
from apps.accounts.token_actions import DEFAULT_TOKEN_DAYS, TOKEN_DAYS
from control_plane.api import ActionViewSet


class TeamSerializer(serializers.ModelSerializer):
    members = serializers.SlugRelatedField(many=True, read_only=True, slug_field="username")

    class Meta:
        model = Team
        fields = ["id", "name", "display_name", "description", "members", "created_at"]


class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = Team.objects.prefetch_related("members")
    serializer_class = TeamSerializer
    lookup_field = "name"
    filterset_fields = ["name"]


# --- API tokens, service accounts, lock-outs ------------------------------------------------------


class LoginTokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, write_only=True,
                                     style={"input_type": "password"})


class ApiTokenSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="user.username", read_only=True)
    service_account = serializers.SerializerMethodField()
    key_prefix = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "owner", "service_account", "key_prefix", "created", "expiry", "last_used_at"]
        read_only_fields = fields

    def get_service_account(self, token) -> int | None:
        account = getattr(token.user, "service_account", None)  # selected with the token (tokens_visible_to)
        return account.pk if account is not None else None

    def get_key_prefix(self, token) -> str:
        return token.token_key[:8]


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret: shown once, only its digest is stored.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    expires_in_days = serializers.IntegerField(min_value=TOKEN_DAYS[0], max_value=TOKEN_DAYS[1],
                                               default=DEFAULT_TOKEN_DAYS)
    service_account = serializers.PrimaryKeyRelatedField(queryset=ServiceAccount.objects.all(), required=False,
                                                         allow_null=True,
                                                         help_text="Make the token for this service account.")


class ObtainTokenView(APIView):
    """POST a username and password, get a token (default life 30 days) for `Authorization: Token <token>`.

    Anyone may call it; failed logins count towards the login lock-out (429 once locked out)."""

    permission_classes = ()
    authentication_classes = ()

    @extend_schema(request=LoginTokenRequestSerializer, responses={200: ApiTokenCreatedSerializer,
                                                                  400: OpenApiTypes.OBJECT, 429: OpenApiTypes.OBJECT})
    def post(self, request):
        body = LoginTokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # the plain HttpRequest: the login guard (axes) marks it, and its middleware answers a lock-out with 429
        user = authenticate(request._request, username=body.validated_data["username"],
                            password=body.validated_data["password"])
        if user is None:
            raise exceptions.ValidationError({"non_field_errors": ["Unable to log in with the username and "
                                                                   "password given."]})
        token, secret = token_actions.login_token(user=user)
        return Response(ApiTokenCreatedSerializer(_with_secret(token, secret)).data)


def _with_secret(token: ApiToken, secret: str) -> ApiToken:
    token.token = secret
    return token


class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your API tokens and those of the service accounts you manage (admins: all). The secret is shown only in
    the answer to the POST that makes it. DELETE revokes a token at once."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = ApiTokenSerializer
    filterset_fields = ["name"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return token_actions.tokens_visible_to(self.request.user).order_by("-created")

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request):
        body = ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        account = body.validated_data.get("service_account")
        token, secret = token_actions.issue_token(
            actor=request.user, owner=account.user if account else request.user, name=body.validated_data["name"],
            expires_in_days=body.validated_data["expires_in_days"])
        return Response(ApiTokenCreatedSerializer(_with_secret(token, secret)).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        token_actions.revoke_token(actor=request.user, token=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceAccountSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Team.objects.all())
    username = serializers.CharField(source="user.username", read_only=True)
    roles = serializers.ListField(child=serializers.ChoiceField(choices=list(ROLES)), required=False, default=list)
    is_active = serializers.BooleanField(source="user.is_active", required=False)

    class Meta:
        model = ServiceAccount
        fields = ["id", "team", "name", "username", "description", "roles", "is_active", "created_at"]
        read_only_fields = ["id", "username", "created_at"]

    def to_representation(self, account):
        data = super().to_representation(account)
        data["roles"] = sorted(account.user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        return data


class ServiceAccountViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ActionViewSet):
    """Team-owned service accounts for automation: their roles decide what their tokens may do, and they act
    for their team. Admins, and approvers of the team, create and change them (team and name are fixed)."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = ServiceAccountSerializer
    filterset_fields = ["team__name", "name"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ServiceAccount.objects.none()
        return token_actions.service_accounts_visible_to(self.request.user).prefetch_related("user__groups")

    def create_via_action(self, data):
        return token_actions.create_service_account(actor=self.request.user, team=data["team"], name=data["name"],
                                                    roles=data.get("roles", []),
                                                    description=data.get("description", ""))

    def update_via_action(self, instance, data):
        if "team" in data or "name" in data:
            raise exceptions.ValidationError({"name": ["A service account's team and name are fixed; make a new one."]})
        return token_actions.update_service_account(
            actor=self.request.user, account=instance, roles=data.get("roles"), description=data.get("description"),
            is_active=data.get("user", {}).get("is_active"))


class LockoutSerializer(serializers.ModelSerializer):
    failures = serializers.IntegerField(source="failures_since_start", read_only=True)
    last_attempt = serializers.DateTimeField(source="attempt_time", read_only=True)

    class Meta:
        model = AccessAttempt
        fields = ["id", "username", "ip_address", "user_agent", "failures", "last_attempt"]
        read_only_fields = fields


class LockoutViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Logins locked out after too many failures (admins). POST …/lift/ lifts one (audited)."""

    serializer_class = LockoutSerializer
    action_perms = {"lift": "axes.delete_accessattempt"}

    def get_queryset(self):
        return lockouts.active_lockouts()

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def lift(self, request, pk=None):
        removed = lockouts.lift_lockout(actor=request.user, attempt=self.get_object())
        return Response({"lifted": True, "attempts_removed": removed})
