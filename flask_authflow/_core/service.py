"""The one shape of the everyday services (``authflow.accounts``, ``.roles``, ``.tokens``,
``.sessions``, ``.devices``, ``.factors``).

The convention every service follows, decided once:

* **The same verbs for the same things.** ``create`` / ``list`` / ``get`` / ``revoke`` (or
  ``delete`` for what is removed for good, as an account or a role); ``grant`` / ``revoke``
  for what a user or a role is given.
* **Whose thing comes first, positionally**: ``user_id`` (the account's stable id, as
  :class:`~flask_authflow._core.ports.UserRecord` has it) for what belongs to a user
  (tokens, sessions, devices, factors, roles held); the account's ``identifier`` (the name
  it signs in with) for the account itself.
* **The tenant is a keyword**, ``tenant=``, defaulting to the app's default tenant
  (``AUTHFLOW_DEFAULT_TENANT``). It is never taken from the request, so a call means the
  same in a view, a command and a shell.
* **Every change is one unit of work with its audit row** (a unit already open in this
  context is joined), audited with the request's context when there is a request and
  ``ip_source="unknown"`` otherwise (the command line, a shell in an app context).
* **Absent is an answer, not an error**: ``get`` returns ``None`` and ``revoke`` returns
  ``False`` for what does not exist; bad input raises an
  :class:`~flask_authflow.errors.AuthFlowError`.
"""

from __future__ import annotations

from flask_authflow._core.identifiers import check_tenant

__all__ = ["TenantScoped"]


class TenantScoped:
    """The base of the everyday services: holds the app's default tenant.

    :param default_tenant: the tenant a call without ``tenant=`` acts in.
    """

    def __init__(self, *, default_tenant: str) -> None:
        self.default_tenant = default_tenant

    def _tenant(self, tenant: str | None) -> str:
        """``tenant``, or the default one; :class:`~flask_authflow.errors.InvalidInput` for a
        malformed one."""
        return check_tenant(self.default_tenant if tenant is None else tenant)
