from django.urls import path

from apps.rebalancing import views

app_name = "rebalancing"
urlpatterns = [
    path("clusters/<str:name>/rebalance/", views.RebalanceStartView.as_view(), name="start"),
    path("rebalances/<int:pk>/resume/", views.RebalanceResumeView.as_view(), name="resume"),
    path("rebalances/<int:pk>/abandon/", views.RebalanceAbandonView.as_view(), name="abandon"),
]
