"""Celery tasks of accounts, run by django-celery-beat: the LDAP sync (migration 0004) and the sweep of expired
API tokens (migration 0005)."""

from __future__ import annotations

from apps.accounts import ldap_login, token_actions
from apps.audit.context import action_context
from control_plane import actors
from control_plane.celery import app


@app.task(bind=True, name="accounts.sync_ldap_users", autoretry_for=(ldap_login.DirectoryUnreachable,),
          retry_backoff=30, retry_backoff_max=600, max_retries=5, acks_late=True)
def sync_ldap_users(self) -> dict:
    """Read every LDAP user Switchyard knows again: remap groups, deactivate who the directory no longer has
    (their API tokens stop working). A directory that does not answer is retried with backoff."""
    with action_context("task", self.request.id):
        return ldap_login.sync_directory()


@app.task(bind=True, name="accounts.delete_expired_tokens", acks_late=True)
def delete_expired_tokens(self) -> int:
    """Delete the API tokens past their expiry (authentication already refuses them), one audit record each."""
    with action_context("task", self.request.id):
        return token_actions.delete_expired_tokens(actor=actors.TOKEN_SWEEP)
