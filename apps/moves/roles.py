"""Who may see topic moves and who may start, roll back or resume them (autodiscovered by sync_role_groups)."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ("moves.view_topicmove", "moves.view_movestep")

extend(DEVELOPER, *READ)  # a developer sees where their topics are going
extend(APPROVER, *READ)
extend(AUDITOR, *READ)
extend(SRE, *READ, "moves.add_topicmove", "moves.rollback_topicmove")
