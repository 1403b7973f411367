from django.urls import path

from apps.moves import views

app_name = "moves"
urlpatterns = [
    path("moves/", views.MoveListView.as_view(), name="list"),
    path("moves/new/", views.MoveStartView.as_view(), name="start"),
    path("moves/<int:pk>/", views.MoveDetailView.as_view(), name="detail"),
    path("moves/<int:pk>/rollback/", views.MoveRollbackView.as_view(), name="rollback"),
    path("moves/<int:pk>/resume/", views.MoveResumeView.as_view(), name="resume"),
]
