"""The lock files under requirements/ as the tests read them: pip-compile's format, one
``name==version ; markers`` line a pin, then its ``--hash`` and ``# via`` lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*(?P<version>[^\s;\\]+)"
    r"\s*(?:;(?P<marker>[^\\]*))?"
)


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    #: the environment marker as the lock writes it (``python_full_version < '3.12'``)
    marker: str | None
    hashes: tuple[str, ...]

    def applies(self) -> bool:
        """Whether pip installs this pin on this interpreter and platform."""
        return self.marker is None or Marker(self.marker).evaluate()

    def constraint(self) -> str:
        """The pin as a constraints file may hold it: no hashes, no extras."""
        pin = f"{self.name}=={self.version}"
        return f"{pin} ; {self.marker}" if self.marker else pin


def parse_lock(text: str) -> list[Pin]:
    """Every pin of a lock, each with the ``--hash`` lines that follow it; comments, options
    (``--index-url``, ``-e``) and ``# via`` lines are passed over."""
    pins: list[Pin] = []
    current: tuple[str, str, str | None] | None = None
    hashes: list[str] = []
    for line in [*text.splitlines(), ""]:
        code = line.partition("#")[0].strip()
        found = PIN.match(code)
        if found or not line.startswith("    "):
            if current is not None:
                pins.append(Pin(*current, tuple(hashes)))
            current, hashes = None, []
        if found:
            marker = (found["marker"] or "").strip() or None
            current = (canonicalize_name(found["name"]), found["version"], marker)
        elif code.startswith("--hash=sha256:"):
            hashes.append(code.removeprefix("--hash=sha256:").rstrip(" \\"))
    return pins


def read_lock(path: Path) -> list[Pin]:
    return parse_lock(path.read_text(encoding="utf-8"))
