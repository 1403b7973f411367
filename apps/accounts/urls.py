from django.urls import path

from apps.accounts import sso_views, views

app_name = "accounts"
urlpatterns = [
    path("account/tokens/", views.TokensView.as_view(), name="tokens"),
    path("account/tokens/<int:pk>/revoke/", views.revoke_token, name="token-revoke"),
    path("service-accounts/", views.ServiceAccountListView.as_view(), name="service-accounts"),
    path("service-accounts/<int:pk>/", views.ServiceAccountView.as_view(), name="service-account"),
    path("security/lockouts/", views.LockoutsView.as_view(), name="lockouts"),
    path("security/lockouts/<int:pk>/lift/", views.LiftLockoutView.as_view(), name="lockout-lift"),
    path("security/sso/", sso_views.SsoMappingsView.as_view(), name="sso-mappings"),
    path("security/sso/<int:pk>/delete/", sso_views.DeleteSsoMappingView.as_view(), name="sso-mapping-delete"),
]
