from django.core.management.base import BaseCommand, CommandError

from apps.audit.recorder import verify_chain


class Command(BaseCommand):
    help = "Verify the hash chain of the audit log and name the first bad record."

    def handle(self, *args, **options):
        report = verify_chain(progress=lambda n: self.stderr.write(f"verified {n} records..."))
        if not report.ok:
            raise CommandError(
                f"audit chain broken at record {report.first_bad_id}: {report.reason}. "
                f"{report.checked} records before it are intact; restore record {report.first_bad_id} "
                "from a backup and investigate who changed the table."
            )
        self.stdout.write(self.style.SUCCESS(f"audit chain intact: {report.checked} records verified"))
