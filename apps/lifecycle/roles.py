"""Who may do what with lifecycle applications (autodiscovered by sync_role_groups)."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ["lifecycle.view_lifecycleapplication"]

extend(DEVELOPER, *READ, "lifecycle.add_lifecycleapplication", "lifecycle.change_lifecycleapplication")
extend(APPROVER, *READ, "lifecycle.approve_lifecycleapplication")
extend(SRE, *READ, "bindings.drop_backlog")
extend(AUDITOR, *READ)
