from django.urls import path

from apps.clusters import views

app_name = "clusters"
urlpatterns = [
    path("", views.ClusterListView.as_view(), name="list"),
    path("new/", views.ClusterFormView.as_view(), name="create"),
    path("series/topic/<int:pk>/", views.TopicSeriesView.as_view(), name="topic-series"),
    path("series/binding/<int:pk>/", views.BindingSeriesView.as_view(), name="binding-series"),
    path("<slug:name>/series/", views.ClusterSeriesView.as_view(), name="series"),
    path("<slug:name>/", views.ClusterDetailView.as_view(), name="detail"),
    path("<slug:name>/edit/", views.ClusterFormView.as_view(), name="edit"),
]
