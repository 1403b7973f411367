"""Who may read traces and run the index (autodiscovered by apps.accounts.roles.sync_role_groups).

Developers and approvers trace the messages of topics their teams own (apps.tracing.queries.visible_messages);
auditors, SREs and admins trace every message (`trace_all_topics`).
"""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ("tracing.view_tracedmessage", "tracing.view_traceevent", "tracing.view_indexrun")
TEAM_READ = "tracing.view_tracedmessage"
ALL_TOPICS = "tracing.trace_all_topics"

extend(DEVELOPER, TEAM_READ)
extend(APPROVER, TEAM_READ)
extend(AUDITOR, *READ, ALL_TOPICS)
extend(SRE, *READ, ALL_TOPICS, "tracing.start_indexrun", "tracing.change_index_schedule")
