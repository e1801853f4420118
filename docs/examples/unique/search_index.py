"""One sync per account at a time, and one reindex per burst of edits (docs/unique.md)."""

from datetime import timedelta

from django_jobs import EnqueueOutcome, task


@task
def sync_account(account_id: int) -> str:
    return f"synced account {account_id}"


@task
def reindex_document(document_id: int, title: str) -> str:
    return f"indexed document {document_id}: {title}"


def sync_now_clicked(account_id: int) -> str:
    """Every click enqueues at most one sync: while one is queued or running, or
    finished less than ten minutes ago, the click gets that one."""
    result = sync_account.using(
        unique_key=f"account:{account_id}", unique_for=timedelta(minutes=10)
    ).enqueue(account_id)
    if result.enqueue_outcome is EnqueueOutcome.EXISTING:
        return f"a sync is already on its way ({result.state})"
    return "sync started"


def document_saved(document_id: int, title: str) -> None:
    """Every save: the index is rebuilt 30 seconds after the last save of a burst,
    once, with the title that save gave."""
    reindex_document.using(
        unique_key=f"document:{document_id}", debounce=timedelta(seconds=30)
    ).enqueue(document_id, title)
