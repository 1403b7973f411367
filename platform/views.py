from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render
from django.views import defaults

from apps.accounts.roles import roles_of
from apps.clusters.models import Cluster


@login_required
def home(request):
    return render(request, "home.html", {"clusters": Cluster.objects.all()[:20], "roles": roles_of(request.user)})


def not_found(request, exception=None):
    """404: JSON under /api/ (the schema's error body), the page otherwise."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No API endpoint or object at {request.path}; see /api/v1/docs/."},
                            status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """500: JSON under /api/ with the request id to quote, the page otherwise (never a traceback)."""
    if request.path.startswith("/api/"):
        request_id = getattr(request, "request_id", "")
        return JsonResponse({"detail": f"Server error; quote request id {request_id or '-'} when reporting it."},
                            status=500)
    return defaults.server_error(request)


def forbidden(request, exception=None):
    message = str(exception) if exception and str(exception) else "Your role does not allow this page."
    return render(request, "403.html", {"message": message}, status=403)
