"""System checks of the audit log's anchoring."""

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def checkpoint_key_set(app_configs, **kwargs):
    if settings.SWITCHYARD_AUDIT_CHECKPOINT_KEY:
        return []
    return [checks.Warning(
        "no audit checkpoint key: the audit chain's head is not anchored outside the database, so deleted newest "
        "audit records and truncation go unnoticed",
        hint="set SWITCHYARD_AUDIT_CHECKPOINT_KEY_FILE to a mode-600 file holding a random key (./dev up makes "
             "state/secrets/audit-checkpoint-key)",
        id="audit.W001")]
