from django.urls import path

from apps.topics import views

app_name = "topics"
urlpatterns = [
    path("topics/", views.TopicListView.as_view(), name="list"),
    path("topics/<int:pk>/", views.TopicDetailView.as_view(), name="detail"),
    path("apps/", views.AppListView.as_view(), name="app-list"),
    path("apps/new/", views.AppCreateView.as_view(), name="app-create"),
    path("apps/<slug:app_id>/", views.AppDetailView.as_view(), name="app-detail"),
    path("apps/<slug:app_id>/rotate-secret/", views.AppRotateView.as_view(), name="app-rotate"),
    path("applications/topics/new/", views.TopicApplicationFormView.as_view(), name="application-create"),
    path("applications/topics/<int:pk>/", views.TopicApplicationDetailView.as_view(), name="application-detail"),
    path("applications/topics/<int:pk>/edit/", views.TopicApplicationFormView.as_view(), name="application-edit"),
    path("applications/topics/<int:pk>/<slug:verb>/", views.TopicApplicationVerbView.as_view(),
         name="application-verb"),
]
