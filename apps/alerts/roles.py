"""Who may read and write alarm rules and silences (autodiscovered by sync_role_groups).

SREs hold every rule of every cluster (`manage_any_alertrule`) and silences; a team's developers and approvers
may add, change and remove rules on their own team's topics only (checked in actions.py)."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ("alerts.view_alertrule", "alerts.view_alertevent")
WRITE = ("alerts.add_alertrule", "alerts.change_alertrule", "alerts.delete_alertrule")

extend(DEVELOPER, *READ, *WRITE)
extend(APPROVER, *READ, *WRITE)
extend(AUDITOR, *READ)
extend(SRE, *READ, *WRITE, "alerts.manage_any_alertrule", "alerts.silence_alertevent")
