"""Alembic environment and revisions: the only way tally's schema changes."""
