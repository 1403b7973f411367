from apps.accounts.roles import ROLE_LABELS, roles_of


def roles(request):
    user_roles = roles_of(getattr(request, "user", None))
    return {
        "user_roles": user_roles,
        "user_role_labels": [ROLE_LABELS[r] for r in sorted(user_roles)],
    }
