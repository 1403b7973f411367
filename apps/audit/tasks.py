"""Celery tasks of the audit log."""

from celery import shared_task

from apps.audit.checkpoint import write_checkpoint


@shared_task(name="audit.write_checkpoint")
def write_checkpoint_task() -> dict:
    """Sign the audit chain's head and write it outside the database (django-celery-beat runs it every 30 s)."""
    point = write_checkpoint("periodic")
    return {"head_id": point.head_id, "count": point.count}
