"""Who may do what with bindings, producer grants and their applications."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ["bindings.view_binding", "bindings.view_producergrant", "bindings.view_bindingapplication",
        "bindings.view_grantapplication"]

extend(DEVELOPER, *READ, "bindings.add_bindingapplication", "bindings.change_bindingapplication",
       "bindings.add_grantapplication", "bindings.change_grantapplication")
extend(APPROVER, *READ, "bindings.approve_bindingapplication", "bindings.approve_grantapplication")
extend(SRE, *READ)
extend(AUDITOR, *READ)
