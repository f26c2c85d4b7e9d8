"""The revisions of flask-authflow's schema (Alembic scripts, oldest first)."""
