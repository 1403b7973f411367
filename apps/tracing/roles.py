"""Who may read traces and run the index (autodiscovered by apps.accounts.roles.sync_role_groups)."""

from apps.accounts.roles import AUDITOR, SRE, extend

READ = ("tracing.view_tracedmessage", "tracing.view_traceevent", "tracing.view_indexrun")

extend(AUDITOR, *READ)
extend(SRE, *READ, "tracing.start_indexrun", "tracing.change_index_schedule")
