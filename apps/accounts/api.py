from rest_framework import mixins, serializers, viewsets

from apps.accounts.models import Team


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
