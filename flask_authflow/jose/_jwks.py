"""JWK sets: immutable snapshots and the shared, lock-guarded handle that rotation updates in place."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flask_authflow.jose._keys import VerificationKey, parse_public_jwk

# -- shared JWK sets ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JwksSnapshot:
    """An immutable view of a JWK set at one version; verifiers work on one snapshot."""

    version: int
    keys: tuple[VerificationKey, ...]
    skipped: int = 0
    by_kid: Mapping[str | None, tuple[VerificationKey, ...]] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )

    @classmethod
    def build(cls, keys: Iterable[VerificationKey], version: int, skipped: int = 0) -> JwksSnapshot:
        ordered = tuple(keys)
        index: dict[str | None, list[VerificationKey]] = {}
        for key in ordered:
            index.setdefault(key.kid, []).append(key)
        return cls(
            version=version,
            keys=ordered,
            skipped=skipped,
            by_kid=MappingProxyType({kid: tuple(items) for kid, items in index.items()}),
        )

    def as_dict(self) -> dict[str, Any]:
        """The public JWK set document ``{"keys": [...]}``."""
        return {"keys": [dict(key.jwk) for key in self.keys]}

    def algorithms(self) -> list[str]:
        """The ``alg`` values named by the keys, in order, without duplicates."""
        seen: dict[str, None] = {}
        for key in self.keys:
            if key.alg is not None:
                seen.setdefault(key.alg, None)
        return list(seen)


def _parse_jwk_set(
    jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]], strict: bool
) -> tuple[list[VerificationKey], int]:
    entries: Any = jwks.get("keys") if isinstance(jwks, Mapping) else jwks
    if not isinstance(entries, list | tuple):
        raise ValueError('a JWK set must be {"keys": [...]}')
    keys: list[VerificationKey] = []
    skipped = 0
    for entry in entries:
        try:
            keys.append(parse_public_jwk(entry))
        except ValueError:
            if strict:
                raise
            skipped += 1  # RFC 7517 §5: ignore keys we do not understand
    return keys, skipped


class JwksHandle:
    """A lock-guarded, replaceable JWK set shared by issuers and verifiers.

    The issuer replaces the set in place on rotation; every verifier holding the
    handle sees the new keys at its next call. ``version`` grows by one on each
    replacement so caches can tell snapshots apart.
    """

    def __init__(
        self, jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None, *, strict: bool = False
    ) -> None:
        self._lock = threading.Lock()
        keys, skipped = _parse_jwk_set(jwks, strict) if jwks is not None else ([], 0)
        self._snapshot = JwksSnapshot.build(keys, version=0, skipped=skipped)

    def snapshot(self) -> JwksSnapshot:
        """The current immutable snapshot."""
        with self._lock:
            return self._snapshot

    @property
    def version(self) -> int:
        return self.snapshot().version

    def replace(
        self, jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, strict: bool = False
    ) -> JwksSnapshot:
        """Swap in a new key set atomically and return the new snapshot.

        Keys that cannot verify signatures are skipped (counted in ``skipped``)
        unless ``strict`` is true, in which case a :class:`ValueError` is raised and
        the old set stays in place.
        """
        keys, skipped = _parse_jwk_set(jwks, strict)  # parse outside the lock
        return self.replace_keys(keys, skipped=skipped)

    def replace_keys(self, keys: Iterable[VerificationKey], *, skipped: int = 0) -> JwksSnapshot:
        """Like :meth:`replace` with already parsed keys."""
        ordered = tuple(keys)
        with self._lock:
            snapshot = JwksSnapshot.build(ordered, version=self._snapshot.version + 1, skipped=skipped)
            self._snapshot = snapshot
            return snapshot

    def as_dict(self) -> dict[str, Any]:
        """The public JWK set document of the current snapshot."""
        return self.snapshot().as_dict()

    def __repr__(self) -> str:
        snap = self.snapshot()
        kids = [key.kid for key in snap.keys]
        return f"<JwksHandle version={snap.version} kids={kids!r}>"
