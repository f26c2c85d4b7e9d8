"""A django-allauth 65 project for tests/test_allauth_migration.py, run only in a subprocess
(``python -m tests.allauth_project.build DATABASE``) so that Django's global settings never
touch the pytest process."""
