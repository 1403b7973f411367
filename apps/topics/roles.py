"""Who may do what with apps, topics and topic applications (autodiscovered by sync_role_groups)."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ["topics.view_topic", "topics.view_app", "topics.view_topicapplication"]

extend(DEVELOPER, *READ, "topics.add_app", "topics.change_app", "topics.add_topicapplication",
       "topics.change_topicapplication")
extend(APPROVER, *READ, "topics.approve_topicapplication", "topics.approve_check_hosts")
extend(SRE, *READ, "topics.approve_production")
extend(AUDITOR, *READ)
