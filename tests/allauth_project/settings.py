"""Settings of the django-allauth project the migration test builds: accounts with mandatory
e-mail verification, social accounts with an OpenID Connect app (``test-op``, the provider
name of flask-authflow's test provider, so the imported links name it), MFA (TOTP, recovery
codes, WebAuthn), and Django's pbkdf2 (default), argon2 and bcrypt hashers. The database is
``ALLAUTH_PROJECT_DATABASE``: a SQLite file, or a ``postgresql+psycopg://`` URL."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

SECRET_KEY = "allauth-project-secret-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
USE_TZ = True
ROOT_URLCONF = "tests.allauth_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
SITE_ID = 1

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.sites",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.mfa",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]


def _database(where: str) -> dict[str, object]:
    if not where.startswith("postgresql"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": where}
    url = urlsplit(where)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.path.lstrip("/"),
        "USER": url.username or "",
        "PASSWORD": url.password or "",
        "HOST": url.hostname or "",
        "PORT": str(url.port or ""),
    }


DATABASES = {"default": _database(os.environ["ALLAUTH_PROJECT_DATABASE"])}
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.BCryptPasswordHasher",
]

ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "APPS": [
            {
                "provider_id": "test-op",
                "name": "Test provider",
                "client_id": "test-client",
                "secret": "test-secret",
                "settings": {"server_url": os.environ.get("ALLAUTH_PROJECT_OIDC_URL", "http://localhost/op")},
            }
        ]
    }
}
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes", "webauthn"]
