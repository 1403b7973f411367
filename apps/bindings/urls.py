from django.urls import path

from apps.bindings import views

app_name = "bindings"
urlpatterns = [
    path("bindings/", views.BindingListView.as_view(), name="list"),
    path("bindings/<int:pk>/", views.BindingDetailView.as_view(), name="detail"),
    path("applications/bindings/new/", views.BindingApplicationFormView.as_view(), name="application-create"),
    path("applications/bindings/<int:pk>/", views.BindingApplicationDetailView.as_view(), name="application-detail"),
    path("applications/bindings/<int:pk>/edit/", views.BindingApplicationFormView.as_view(),
         name="application-edit"),
    path("applications/bindings/<int:pk>/<slug:verb>/", views.BindingApplicationVerbView.as_view(),
         name="application-verb"),
    path("applications/grants/new/", views.GrantApplicationFormView.as_view(), name="grant-application-create"),
    path("applications/grants/<int:pk>/", views.GrantApplicationDetailView.as_view(),
         name="grant-application-detail"),
    path("applications/grants/<int:pk>/edit/", views.GrantApplicationFormView.as_view(),
         name="grant-application-edit"),
    path("applications/grants/<int:pk>/<slug:verb>/", views.GrantApplicationVerbView.as_view(),
         name="grant-application-verb"),
]
