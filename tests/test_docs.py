"""The documentation builds without warnings and documents every configuration key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flask_authflow.config import DEFAULTS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "config.rst").read_text()
    missing = [key for key in DEFAULTS if f"``{key}``" not in text]
    assert missing == []


def test_sphinx_build_has_no_warnings(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html", str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "html" / "config.html").exists()
