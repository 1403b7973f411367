"""REST: the SSO group-mapping rules (/api/v1/sso-mappings/). Admins read and write them, auditors read."""

from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from apps.accounts import sso_actions
from apps.accounts.models import SSO_SOURCES, SsoGroupMapping, Team
from apps.accounts.roles import ROLES
from control_plane.api import ActionViewSet


class SsoMappingSerializer(serializers.ModelSerializer):
    source = serializers.ChoiceField(choices=SSO_SOURCES)
    team = serializers.SlugRelatedField(slug_field="name", queryset=Team.objects.all(), required=False,
                                        allow_null=True)
    role = serializers.ChoiceField(choices=[("", "none"), *[(r, r) for r in ROLES]], required=False,
                                   allow_blank=True, default="")

    class Meta:
        model = SsoGroupMapping
        fields = ["id", "source", "group", "team", "role", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators = []  # the action checks a rule (a duplicate included) and answers with field errors


class SsoMappingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ActionViewSet):
    """Directory group → role and/or team, applied at every SSO login and LDAP sync (docs/sso.md). A user who
    leaves a group loses what its rules gave at the next login or sync; deleting a rule does the same."""

    queryset = SsoGroupMapping.objects.select_related("team")
    serializer_class = SsoMappingSerializer
    filterset_fields = ["source", "group", "role"]

    def create_via_action(self, data):
        return sso_actions.create_mapping(actor=self.request.user, source=data["source"], group=data["group"],
                                          team=data.get("team"), role=data.get("role", ""))

    def update_via_action(self, instance, data):
        return sso_actions.update_mapping(actor=self.request.user, mapping=instance, **data)

    def destroy(self, request, pk=None):
        sso_actions.delete_mapping(actor=request.user, mapping=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
