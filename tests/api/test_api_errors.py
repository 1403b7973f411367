"""Input the database cannot take is a 4xx with field errors, and an unknown API URL a JSON 404."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def auditor(make_user, api_for):
    return api_for(make_user("audit-1", "auditor"))


@pytest.mark.parametrize("path", ["/api/v1/audit-records/", "/api/v1/traces/messages/"])
@pytest.mark.parametrize(("value", "words"), [
    ("0107-05-23T00:40:31+19:32", "UTC offset between -14:00 and +14:00"),  # Python takes it, PostgreSQL not
    ("0001-01-01T00:00:00+14:00", "between the years 1 and 9999"),  # before year 1 in UTC
    ("2020-01-01T25:00", "valid date/time"),
])
def test_unusual_dates_are_field_errors(auditor, path, value, words):
    for name in ("since", "until"):
        response = auditor.get(path, {name: value})
        assert response.status_code == 400, response.content
        assert words in response.json()[name][0]


def test_unknown_api_url_is_a_json_404(auditor, settings):
    settings.DEBUG = False  # as in production (with DEBUG on, Django shows its own page)
    response = auditor.get("/api/v1/tx/messages/abc/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json" and "No API endpoint" in response.json()["detail"]


def test_a_400_body_is_always_an_object(auditor):
    response = auditor.get("/api/v1/apps/", {"search": "a\x00b"})  # a null character (PostgreSQL takes none)
    assert response.status_code == 400
    assert isinstance(response.json(), dict) and response.json()["non_field_errors"], response.content
