from django.apps import AppConfig


class TransactionsConfig(AppConfig):
    name = "apps.transactions"
    label = "transactions"
    verbose_name = "Transaction back-checks and dead-letter re-drive"
