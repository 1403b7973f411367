"""The control plane's URLs plus two views that fail (a page and an API view), for the 500 test."""

from django.urls import path
from rest_framework.decorators import api_view, permission_classes

from control_plane.urls import handler403  # noqa: F401  (handler403 kept)
from control_plane.urls import urlpatterns as control_plane_urls


def page_boom(request):
    raise RuntimeError("secret-internal-detail at /srv/switchyard")


@api_view(["GET"])
@permission_classes([])
def api_boom(request):
    raise RuntimeError("secret-internal-detail at /srv/switchyard")


urlpatterns = [path("boom/", page_boom), path("api/v1/boom/", api_boom), *control_plane_urls]
