"""Who may see back-checks and re-drives, and who may act (autodiscovered by sync_role_groups)."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ("transactions.view_preparedmessage", "transactions.view_txcheck", "transactions.view_redrive")

extend(DEVELOPER, *READ)  # the governance view shows a developer their own teams' topics only
extend(APPROVER, *READ)
extend(AUDITOR, *READ)
extend(SRE, *READ, "transactions.add_redrive", "transactions.resolve_preparedmessage")
