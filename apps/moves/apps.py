from django.apps import AppConfig


class MovesConfig(AppConfig):
    name = "apps.moves"
    label = "moves"
    verbose_name = "Topic moves between clusters"
