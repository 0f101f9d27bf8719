from django.apps import AppConfig


class ReposConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "repos"
    verbose_name = "Repositories"
