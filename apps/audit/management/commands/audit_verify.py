from django.core.management.base import BaseCommand, CommandError

from apps.audit.checkpoint import CheckpointKeyMissing
from apps.audit.verify import verify_audit


class Command(BaseCommand):
    help = ("Verify the audit log: re-compute the hash chain, and compare the table with every signed checkpoint "
            "of its head, naming altered, deleted and missing records. Exits non-zero on any finding.")

    def handle(self, *args, **options):
        try:
            result = verify_audit(progress=lambda n: self.stderr.write(f"verified {n} records..."))
        except CheckpointKeyMissing as exc:
            raise CommandError(str(exc)) from None
        for note in result.notes:
            self.stderr.write(f"note: {note}")
        if not result.ok:
            raise CommandError("the audit log was tampered with:\n  " + "\n  ".join(result.problems))
        self.stdout.write(self.style.SUCCESS(
            f"audit chain intact: {result.records} records verified, {result.checkpoints} checkpoints checked"))
