from django.contrib import admin

from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance.admin import ReadOnlyAdmin


@admin.register(Binding)
class BindingAdmin(ReadOnlyAdmin):
    list_display = ("topic", "group", "app", "mode", "revision", "status")
    list_filter = ("mode", "status")
    search_fields = ("group", "topic__name", "app__app_id")


@admin.register(ProducerGrant)
class ProducerGrantAdmin(ReadOnlyAdmin):
    list_display = ("topic", "app", "revision", "status")
    search_fields = ("topic__name", "app__app_id")


@admin.register(BindingApplication)
class BindingApplicationAdmin(ReadOnlyAdmin):
    list_display = ("id", "topic", "group", "app", "applicant", "state", "submitted_at")
    list_filter = ("state",)


@admin.register(GrantApplication)
class GrantApplicationAdmin(ReadOnlyAdmin):
    list_display = ("id", "topic", "app", "applicant", "state", "submitted_at")
    list_filter = ("state",)
