from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from apps.accounts.roles import roles_of


@login_required
def home(request):
    from apps.clusters.models import Cluster

    return render(request, "home.html", {"clusters": Cluster.objects.all()[:20], "roles": roles_of(request.user)})


def forbidden(request, exception=None):
    message = str(exception) if exception and str(exception) else "Your role does not allow this page."
    return render(request, "403.html", {"message": message}, status=403)
