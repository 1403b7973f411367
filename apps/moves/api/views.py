from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.moves import actions
from apps.moves.api.serializers import MoveRequestSerializer, TopicMoveSerializer
from apps.moves.filtersets import TopicMoveFilterSet
from apps.moves.models import TopicMove


class TopicMoveViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Moves of topics between clusters (docs/migration.md). POST starts one (SRE): refused with field errors
    when it cannot be done safely, else 202 with the move, which a Celery worker then advances step by step;
    GET shows each step with its figures; `rollback/` brings the topic back to the source (before
    deprovisioning); `resume/` runs a failed move's step again."""

    queryset = TopicMove.objects.select_related("topic", "source", "target").prefetch_related("steps")
    serializer_class = TopicMoveSerializer
    filterset_class = TopicMoveFilterSet
    lookup_value_regex = "[0-9]+"
    action_perms = {"rollback": "moves.rollback_topicmove", "resume": "moves.rollback_topicmove"}

    @extend_schema(request=MoveRequestSerializer, responses={202: TopicMoveSerializer})
    def create(self, request, *args, **kwargs):
        body = MoveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        move = actions.start_move(actor=request.user, **body.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=move.pk)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: TopicMoveSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """Roll the move back: producers to the source, what reached the target drained back, the target let go."""
        move = actions.rollback_move(actor=request.user, move=self.get_object())
        return Response(self.get_serializer(self.get_queryset().get(pk=move.pk)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: TopicMoveSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        """Run a failed move's step again."""
        move = actions.resume_move(actor=request.user, move=self.get_object())
        return Response(self.get_serializer(self.get_queryset().get(pk=move.pk)).data, status=status.HTTP_202_ACCEPTED)
