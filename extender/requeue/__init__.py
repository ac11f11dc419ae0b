"""Requeueing pending pods when their RuntimeClass changes (serve --requeue-pending-pods)."""
