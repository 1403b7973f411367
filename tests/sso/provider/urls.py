from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.sso.provider import views

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("directory/users/<str:username>/", views.put_user),
    path("directory/client/", views.put_client),
]
