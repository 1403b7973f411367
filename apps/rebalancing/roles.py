"""Who may see and run rebalances (autodiscovered by sync_role_groups): SREs only, and auditors may read them."""

from apps.accounts.roles import AUDITOR, SRE, extend

READ = ("rebalancing.view_rebalance",)

extend(AUDITOR, *READ)
extend(SRE, *READ, "rebalancing.add_rebalance", "rebalancing.change_rebalance")
