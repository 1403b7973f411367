"""OPTIONS answers of the REST API (its own module: DRF loads it while rest_framework.views is still being
imported, so it may not import views or viewsets)."""

from rest_framework import metadata


class Metadata(metadata.SimpleMetadata):
    """OPTIONS answers. DRF's describes PUT by loading the object, which a list-level action that takes PUT
    (e.g. reconcile-runs/schedule/) has none of: an AssertionError, a 500. Such a view is described without it."""

    def determine_actions(self, request, view):
        lookup = view.lookup_url_kwarg or view.lookup_field if hasattr(view, "lookup_field") else None
        if lookup and lookup not in getattr(view, "kwargs", {}) and getattr(view, "detail", None) is False:
            view.get_object = lambda: None
        return super().determine_actions(request, view)
