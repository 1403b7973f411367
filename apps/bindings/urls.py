from django.urls import path

from apps.bindings import views
from apps.bindings.models import BindingApplication, GrantApplication
from apps.governance.routes import application_urls

app_name = "bindings"
urlpatterns = [
    path("bindings/", views.BindingListView.as_view(), name="list"),
    path("bindings/<int:pk>/", views.BindingDetailView.as_view(), name="detail"),
    *application_urls("applications/bindings/", BindingApplication, form_view=views.BindingApplicationFormView,
                      detail_view=views.BindingApplicationDetailView),
    *application_urls("applications/grants/", GrantApplication, form_view=views.GrantApplicationFormView,
                      detail_view=views.GrantApplicationDetailView),
]
