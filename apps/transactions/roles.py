"""Who may see back-checks, re-drives and dead letters, and who may act (autodiscovered by sync_role_groups).

Dead letters (docs/transactions.md "Dead-letter browser"): SREs browse and act on every topic; auditors browse
every topic and change nothing; developers browse and act (re-drive, delete, copy, reset a group's position)
on their own teams' topics; approvers browse their own teams' topics. The team scope is checked in
`apps.transactions.dead_letters.may_browse` / `may_manage`, which the actions and views call.
"""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ("transactions.view_preparedmessage", "transactions.view_txcheck", "transactions.view_redrive")
BROWSE = "transactions.browse_deadletters"
MANAGE = "transactions.manage_deadletters"

extend(DEVELOPER, *READ, BROWSE, MANAGE)  # the governance view shows a developer their own teams' topics only
extend(APPROVER, *READ, BROWSE)
extend(AUDITOR, *READ, BROWSE)
extend(SRE, *READ, BROWSE, MANAGE, "transactions.add_redrive", "transactions.resolve_preparedmessage")
