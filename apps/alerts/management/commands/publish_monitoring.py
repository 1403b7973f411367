from django.core.management.base import BaseCommand

from apps.alerts.publish import PublishFailed, publish_config, write_targets


class Command(BaseCommand):
    help = "Write the brokers Prometheus scrapes and the alarm rules, and reload Prometheus and Alertmanager."

    def handle(self, *args, **options):
        targets = write_targets()
        try:
            rules = publish_config()
        except PublishFailed as exc:
            self.stderr.write(f"alarm rules not published: {exc}")
            rules = "no"
        self.stdout.write(f"{targets} broker target(s), {rules} alarm rule(s) published")
