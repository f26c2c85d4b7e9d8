"""The limiter: :class:`Throttle` counts requests per address, network, account and recipient.

Built on the ``limits`` library (its moving-window strategy), with memory storage by
default and Redis when the session store is Redis, so every process sees the same counts.
A flow asks before it does any work that costs something (an Argon2 verify, a mail):

.. code-block:: python

    throttle.hit("login", address=client_ip)               # login, factor, signup, reset
    throttle.hit("mail", address=client_ip, recipient=to, account=(tenant, user_id))
    throttle.stranger_mail(to, address=client_ip, account=(tenant, user_id))  # forgot-password ...

Every limit of the request is tested first, and only when all of them have room is one
request counted against each, so a refused request never eats into the budget of another
dimension. A refusal raises :class:`~flask_authflow.errors.Throttled` with the seconds
until the tightest window lets one through (the view answers 429 with ``Retry-After``).

The failure-rate guard: every failed credential check is reported with
:meth:`Throttle.failure`; while the failures of all accounts together are over
``failures.global``, each address also gets the much lower ``login.spike`` limit on
login, so a credential-stuffing wave slows everyone's guesses instead of running at the
speed of the servers.

Mail budgets: the mails a user asks for after proving something (an e-mail code after her
password) count in scope ``mail``; those anyone can trigger for someone else's address
(forgot-password, sign-up, resend) in scope ``stranger_mail``, so strangers cannot spend the
owner's budget. :meth:`Throttle.stranger_mail` lets a request the owner makes from a network
where her account signed in (:meth:`Throttle.owner_signed_in`), or from her device, spend her
own budget instead.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping

from limits import RateLimitItem
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from flask_authflow._throttle.keys import UNKNOWN, AddressKeys, address_key, digest, network_key
from flask_authflow._throttle.settings import DEFAULT_LIMITS, SCOPES, ThrottleSettings, parse_limits
from flask_authflow.audit._context import audit_context
from flask_authflow.errors import ConfigurationError, StoreUnavailable, Throttled

__all__ = ["Throttle"]

log = logging.getLogger("flask_authflow.throttle")

#: (limit name, key) pairs a request is counted against.
Counted = list[tuple[str, str]]

#: How long a network where an account signed in counts as its owner's (for the mail budget):
#: 90 days from the last sign-in there.
OWNER_NETWORK_SECONDS = 90 * 24 * 3600


class Throttle:
    """Rate limits over one ``limits`` storage.

    :param limits: limit name -> parsed limits (see :data:`~flask_authflow._throttle.DEFAULT_LIMITS`);
        default: the defaults.
    :param storage: a ``limits`` storage; default: a new memory storage.
    :param enabled: ``False`` makes every check pass (nothing is counted).
    """

    __slots__ = ("_limiter", "_limits", "_lock", "enabled", "storage")

    def __init__(
        self,
        limits: Mapping[str, tuple[RateLimitItem, ...]] | None = None,
        storage: Storage | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self._limits = dict(limits) if limits is not None else parse_limits("limits", {})
        missing = sorted(set(DEFAULT_LIMITS) - set(self._limits))
        if missing:
            raise ConfigurationError(f"the throttle needs every limit; missing {missing}")
        self.storage: Storage = storage if storage is not None else MemoryStorage()
        self._limiter = MovingWindowRateLimiter(self.storage)
        self.enabled = enabled
        # Test-then-count is one step within the process (a parallel burst cannot slip past a
        # limit); across processes sharing Redis, concurrent requests may overshoot by a few.
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: ThrottleSettings) -> Throttle:
        """The throttle ``AUTHFLOW_THROTTLE*`` describe (Redis needs the ``redis`` extra)."""
        try:
            storage = storage_from_string(settings.storage())
        except Exception as exc:  # a missing driver, a malformed URL
            raise ConfigurationError(f"the throttle's storage cannot be used: {exc}") from exc
        if not isinstance(storage, Storage):  # an asyncio storage ("async+redis://")
            raise ConfigurationError("AUTHFLOW_THROTTLE_STORAGE_URL must name a synchronous storage")
        return cls(settings.limits(), storage, enabled=settings.enabled)

    @classmethod
    def disabled(cls) -> Throttle:
        """A throttle that lets everything through (a service built without one)."""
        return cls(enabled=False)

    def limits(self, name: str) -> tuple[RateLimitItem, ...]:
        """The limits called ``name`` (``login.address``, ...)."""
        return self._limits[name]

    def hit(
        self,
        scope: str,
        *,
        address: str | None,
        account: tuple[str, str] | None = None,
        recipient: str | None = None,
    ) -> None:
        """Count one request of ``scope`` from ``address`` (and for ``account``, to ``recipient``).

        :raises Throttled: a limit has no room left (nothing was counted).
        :raises StoreUnavailable: the limiter's storage failed (fail closed).
        """
        if scope not in SCOPES:
            raise ValueError(f"unknown throttle scope {scope!r}; known: {SCOPES}")
        if not self.enabled:
            return
        counted = self._address_limits(scope, address)  # the address parsed once for all
        if account is not None:
            counted.append((f"{scope}.account", digest(*account)))
        if recipient is not None:
            counted.append((f"{scope}.recipient", digest(recipient)))
        if scope == "login" and self.spiking():
            counted.append(("login.spike", counted[0][1]))  # (the address key)
        self._hit_all([(name, key) for name, key in counted if name in self._limits])

    def mail(self, to: str, tenant: str, user_id: str) -> None:
        """Count one mail to ``to`` for the account (tenant, user_id), from the current
        request's client address (see :meth:`hit`); call it before sending.

        :raises Throttled: the address, its network, the recipient or the account has
            had its share of mails.
        """
        self.hit("mail", address=audit_context().client_ip, recipient=to, account=(tenant, user_id))

    def code_attempt(self, tenant: str, identifier: str, address: str | None) -> None:
        """Count one attempt at the mailed short code of the account ``identifier`` names,
        before the code is checked: per address, per network and per (account, network).

        :raises Throttled: a limit has no room (nothing was counted).
        :raises StoreUnavailable: the limiter's storage failed (fail closed).
        """
        if not self.enabled:
            return
        keys = AddressKeys(address)
        network = keys.network
        counted: Counted = [
            ("code.address", keys.address),
            ("code.network", network),
            ("code.pair", digest(tenant, identifier, network)),
        ]
        self._hit_all(counted)

    def refuse_if_spent(self, scope: str, address: str | None) -> None:
        """Raise :class:`Throttled` when ``address`` (or its network) had its share of
        ``scope``'s refusals; counts nothing (see :meth:`count_refusal`).

        :raises StoreUnavailable: the limiter's storage failed (fail closed)."""
        if not self.enabled:
            return
        keys = self._address_limits(scope, address)
        try:
            refused = [
                (name, item, key)
                for name, key in keys
                for item in self._limits[name]
                if not self._limiter.test(item, name, key)
            ]
        except Exception as exc:
            raise StoreUnavailable("the rate limiter's storage failed") from exc
        if refused:
            raise self._refusal(refused)

    def count_refusal(self, scope: str, address: str | None) -> None:
        """Count one refused request of ``scope`` against ``address`` and its network (after
        the refusal; parallel requests may overshoot the limit by the number in flight).
        Never raises: the request is refused anyway (a storage failure is logged)."""
        if not self.enabled:
            return
        try:
            for name, key in self._address_limits(scope, address):
                for item in self._limits[name]:
                    self._limiter.hit(item, name, key)
        except Exception:
            log.warning("the throttle's storage failed while counting a refusal", exc_info=True)

    @staticmethod
    def _address_limits(scope: str, address: str | None) -> Counted:
        """``scope``'s per-address and per-network limits, with ``address``'s keys (one parse)."""
        keys = AddressKeys(address)
        return [(f"{scope}.address", keys.address), (f"{scope}.network", keys.network)]

    def tally(self, name: str, address: str | None, seconds: int) -> int:
        """Count one event ``name`` from ``address`` in the current fixed window of
        ``seconds``; the count so far (1 for the first). Never raises: 1 when the storage
        fails, so a caller that writes the first event of a window writes it rather than lose it."""
        window = int(time.time()) // seconds
        key = f"tally/{name}/{address_key(address)}/{window}"
        try:
            return int(self.storage.incr(key, seconds))
        except Exception:
            log.warning("the throttle's storage failed while counting %s", name, exc_info=True)
            return 1

    def stranger_mail(
        self,
        to: str,
        *,
        address: str | None,
        account: tuple[str, str] | None = None,
        device_user: str | None = None,
    ) -> str:
        """Count one mail to ``to`` that an anonymous request asked for; call it before sending.

        It is the owner's own request, and spends her budget (scope ``mail``, with
        ``account``), when it comes from a device of hers (``device_user`` is the account's
        user id: a signed device cookie of hers) or from a network where the account signed
        in; any other request spends the strangers' budget (scope ``stranger_mail``).

        :returns: the scope that was spent.
        :raises Throttled: that budget had its share.
        :raises StoreUnavailable: the limiter's storage failed.
        """
        if not self.enabled:
            return "stranger_mail"
        if account is not None and (device_user == account[1] or self.is_owner_network(*account, address)):
            self.hit("mail", address=address, recipient=to, account=account)
            return "mail"
        self.hit("stranger_mail", address=address, recipient=to)
        return "stranger_mail"

    def owner_signed_in(self, tenant: str, user_id: str, address: str | None) -> None:
        """Remember that the account signed in from ``address``'s network (for
        :meth:`stranger_mail`); never raises (a failure is logged: only the budget suffers)."""
        key = self._owner_key(tenant, user_id, address)
        if not self.enabled or key is None:
            return
        try:
            self.storage.clear(key)  # a fresh expiry: the memory lasts from the last sign-in
            self.storage.incr(key, OWNER_NETWORK_SECONDS)
        except Exception:
            log.warning("the throttle's storage failed while remembering a sign-in's network", exc_info=True)

    def is_owner_network(self, tenant: str, user_id: str, address: str | None) -> bool:
        """True when the account signed in from ``address``'s network in the last 90 days.

        :raises StoreUnavailable: the limiter's storage failed."""
        key = self._owner_key(tenant, user_id, address)
        if key is None:
            return False
        try:
            return self.storage.get(key) > 0
        except Exception as exc:
            raise StoreUnavailable("the rate limiter's storage failed") from exc

    @staticmethod
    def _owner_key(tenant: str, user_id: str, address: str | None) -> str | None:
        network = network_key(address)
        if network == UNKNOWN:  # garbage or a missing address is nobody's network
            return None
        return f"owner-network/{digest(tenant, user_id, network)}"

    def failure(self) -> None:
        """Report one failed credential check to the failure-rate guard (never raises)."""
        if not self.enabled:
            return
        try:
            for item in self._limits["failures.global"]:
                self._limiter.hit(item, "failures.global", "all")
        except Exception:  # the guard is advisory: the lockout still counts the failure
            log.warning("the throttle's storage failed while counting a failure", exc_info=True)

    def spiking(self) -> bool:
        """True while failed checks of all accounts together are over ``failures.global``."""
        return not self._room(self._limits["failures.global"], "failures.global", "all")

    def reset(self) -> None:
        """Forget every count (an administrator's action, and tests)."""
        self.storage.reset()

    def _room(self, items: Iterable[RateLimitItem], name: str, key: str) -> bool:
        try:
            return all(self._limiter.test(item, name, key) for item in items)
        except Exception as exc:
            raise StoreUnavailable("the rate limiter's storage failed") from exc

    def _hit_all(self, counted: Counted) -> None:
        with self._lock:
            self._hit_all_locked(counted)

    def _hit_all_locked(self, counted: Counted) -> None:
        try:
            refused = [
                (name, item, key)
                for name, key in counted
                for item in self._limits[name]
                if not self._limiter.test(item, name, key)
            ]
            if refused:
                raise self._refusal(refused)
            for name, key in counted:
                for item in self._limits[name]:
                    self._limiter.hit(item, name, key)
        except Throttled:
            raise
        except Exception as exc:
            raise StoreUnavailable("the rate limiter's storage failed") from exc

    def _refusal(self, refused: list[tuple[str, RateLimitItem, str]]) -> Throttled:
        now = time.time()
        waits = [
            (self._limiter.get_window_stats(item, name, key).reset_time - now, name)
            for name, item, key in refused
        ]
        wait, name = max(waits)
        return Throttled(retry_after=math.ceil(max(wait, 1.0)), scope=name)

    def __repr__(self) -> str:
        return f"Throttle(enabled={self.enabled}, storage={type(self.storage).__name__})"
