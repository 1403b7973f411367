"""`{% rebalance_section cluster %}` on the cluster page: the cluster's open (or last) rebalance with its progress,
and for SREs the plan a new one would follow (when `health`, the page's ZooKeeper read, says it answered) (`?remove=<node id>` previews emptying brokers) with its buttons."""

from django import template
from django.core.exceptions import ValidationError

from apps.rebalancing import actions
from apps.rebalancing.models import Rebalance
from apps.rebalancing.plan import Step

register = template.Library()


@register.inclusion_tag("rebalancing/_section.html", takes_context=True)
def rebalance_section(context, cluster, health=None):
    request = context["request"]
    user = request.user
    out = {"cluster": cluster, "can_view": user.has_perm("rebalancing.view_rebalance"),
           "can_start": user.has_perm("rebalancing.add_rebalance"),
           "can_change": user.has_perm("rebalancing.change_rebalance"), "csrf_token": context.get("csrf_token")}
    if not out["can_view"]:
        return out
    last = Rebalance.objects.filter(cluster=cluster).first()
    out["rebalance"] = last
    if last is not None:
        out["steps"] = [(i, Step.from_dict(s)) for i, s in enumerate(last.steps)]
    if health is not None and not health.reachable:
        out["preview_errors"] = [f"ZooKeeper of {cluster.name} is unreachable: no plan can be read now."]
    elif out["can_start"] and (last is None or not last.open):
        remove = request.GET.getlist("remove")
        out["remove"] = remove
        try:
            planned = out["preview"] = actions.preview(actor=user, cluster=cluster, remove=remove)
            nodes = sorted(set(planned.brokers) | set(planned.replicas_before))
            out["load"] = [(n, planned.replicas_before.get(n, 0), planned.replicas_after.get(n, 0)) for n in nodes]
        except ValidationError as exc:
            out["preview_errors"] = [m for messages in exc.message_dict.values() for m in messages]
    return out
