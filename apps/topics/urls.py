from django.urls import path

from apps.governance.routes import application_urls
from apps.topics import views
from apps.topics.models import TopicApplication

app_name = "topics"
urlpatterns = [
    path("topics/", views.TopicListView.as_view(), name="list"),
    path("topics/<int:pk>/", views.TopicDetailView.as_view(), name="detail"),
    path("apps/", views.AppListView.as_view(), name="app-list"),
    path("apps/new/", views.AppCreateView.as_view(), name="app-create"),
    path("apps/<slug:app_id>/", views.AppDetailView.as_view(), name="app-detail"),
    path("apps/<slug:app_id>/rotate-secret/", views.AppRotateView.as_view(), name="app-rotate"),
    *application_urls("applications/topics/", TopicApplication, form_view=views.TopicApplicationFormView,
                      detail_view=views.TopicApplicationDetailView),
]
