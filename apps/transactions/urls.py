from django.urls import path

from apps.transactions import dlq_views, views

app_name = "transactions"
urlpatterns = [
    path("transactions/", views.TxOverviewView.as_view(), name="overview"),
    path("transactions/messages/", views.TxMessagesView.as_view(), name="messages"),
    path("redrives/", views.RedriveListView.as_view(), name="redrives"),
    path("redrives/<int:pk>/", views.RedriveDetailView.as_view(), name="redrive"),
    path("dead-letters/", dlq_views.DeadLetterIndexView.as_view(), name="dead-letter-index"),
    path("dead-letters/<int:pk>/", dlq_views.DeadLetterBrowserView.as_view(), name="dead-letters"),
    path("dead-letters/<int:pk>/reset-position/", dlq_views.GroupResetView.as_view(), name="group-reset"),
    path("apps/<slug:app_id>/check-url/", views.AppCheckUrlView.as_view(), name="app-check-url"),
    path("apps/<slug:app_id>/check-hosts/", views.AppCheckHostsView.as_view(), name="app-check-hosts"),
]
