"""The pages of one application kind, wired the same way for every kind: under `route` (e.g.
"applications/topics/"), named after the model's `url_name` without its namespace (e.g. "application")."""

from __future__ import annotations

from django.urls import path

from apps.governance.views import ApplicationVerbView


def application_urls(route: str, model, *, form_view, detail_view, create: bool = True) -> list:
    """new/ (when the kind is created from a blank form), <pk>/, <pk>/edit/ and <pk>/<verb>/."""
    name = model.url_name.split(":", 1)[1]
    urls = [path(f"{route}new/", form_view.as_view(), name=f"{name}-create")] if create else []
    return urls + [
        path(f"{route}<int:pk>/", detail_view.as_view(), name=f"{name}-detail"),
        path(f"{route}<int:pk>/edit/", form_view.as_view(), name=f"{name}-edit"),
        path(f"{route}<int:pk>/<slug:verb>/", ApplicationVerbView.as_view(model=model, detail_view=detail_view), name=f"{name}-verb"),
    ]
