from django.urls import path

from apps.transactions import views

app_name = "transactions"
urlpatterns = [
    path("transactions/", views.TxOverviewView.as_view(), name="overview"),
    path("transactions/messages/", views.TxMessagesView.as_view(), name="messages"),
    path("redrives/", views.RedriveListView.as_view(), name="redrives"),
    path("redrives/<int:pk>/", views.RedriveDetailView.as_view(), name="redrive"),
    path("apps/<slug:app_id>/check-url/", views.AppCheckUrlView.as_view(), name="app-check-url"),
    path("apps/<slug:app_id>/check-hosts/", views.AppCheckHostsView.as_view(), name="app-check-hosts"),
]
