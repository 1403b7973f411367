"""`{% move_panel topic %}` on the topic page: the topic's open move, and the start form for SREs."""

from django import template

from apps.moves.choices import OPEN_STATES
from apps.moves.forms import MoveForm
from apps.moves.models import TopicMove

register = template.Library()


@register.inclusion_tag("moves/_panel.html", takes_context=True)
def move_panel(context, topic):
    user = context["request"].user
    open_move = TopicMove.objects.filter(topic=topic, state__in=OPEN_STATES).select_related("target").first()
    can_start = user.has_perm("moves.add_topicmove") and open_move is None
    return {"topic": topic, "open_move": open_move, "can_view": user.has_perm("moves.view_topicmove"),
            "form": MoveForm(topic=topic) if can_start else None, "csrf_token": context.get("csrf_token")}
