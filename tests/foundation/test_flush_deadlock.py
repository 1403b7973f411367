"""The test database's flush survives a deadlock with another session (in the suite, the Celery worker finishing a
task the test started): tests/conftest.py flushes again. Without that, this test errors at its teardown
("deadlock detected") and leaves its rows to the next test."""

import re
import threading
import time

import psycopg2
import pytest
from django.core.management.color import no_style
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_flush_deadlocked_by_another_session_is_done_again():
    """Another session reads the last table the flush truncates, then, once the flush waits for it, the first
    table: PostgreSQL aborts the flush, which is tried again after the other session ends."""
    from django.contrib.auth.models import User
    User.objects.create(username="x1")
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    sql = connection.ops.sql_flush(no_style(), tables, allow_cascade=True)
    names = re.findall(r'"([^"]+)"', sql[0])
    first, last = names[0], names[-1]
    params = dict(connection.settings_dict)
    conn = psycopg2.connect(dbname=params["NAME"], user=params["USER"], password=params["PASSWORD"],
                            host=params["HOST"], port=params["PORT"])
    cur = conn.cursor()
    cur.execute(f'SELECT 1 FROM "{last}" LIMIT 1')

    def later():
        time.sleep(0.5)
        try:
            cur.execute(f'SELECT 1 FROM "{first}" LIMIT 1')
        except psycopg2.Error:
            pass
        time.sleep(0.3)
        conn.rollback()
        conn.close()
    threading.Thread(target=later, daemon=True).start()

