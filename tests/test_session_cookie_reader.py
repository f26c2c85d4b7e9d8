"""The session interface reads its cookie from the raw header without parsing every cookie;
the answer must always be werkzeug's (``request.cookies.get(name)``)."""

from __future__ import annotations

import secrets

from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from flask_authflow.session.interface import AuthFlowSessionInterface
from flask_authflow.session.stores import MemorySessionStore

NAME = "authflow_session"
INTERFACE = AuthFlowSessionInterface(MemorySessionStore(), secrets.token_bytes(32))


def _request(header: str | None) -> Request:
    headers = {} if header is None else {"Cookie": header}
    builder = EnvironBuilder(path="/", headers=headers)
    try:
        return Request(builder.get_environ())
    finally:
        builder.close()


def _both(header: str | None) -> tuple[str | None, str | None]:
    fast = INTERFACE._cookie_value(_request(header))
    slow = _request(header).cookies.get(NAME)
    return fast, slow


def test_plain_and_tricky_headers() -> None:
    signed = INTERFACE.sign_sid("a" * 43)
    cases = [
        None,
        "",
        f"{NAME}={signed}",
        f"other=1; {NAME}={signed}; more=2",
        f"x{NAME}={signed}",  # another cookie whose name contains ours
        f"{NAME}2={signed}",
        f"other={NAME}",  # our name inside another cookie's value
        f'{NAME}="{signed}"',  # quoted: the full parser decides
        f"{NAME}={signed}; {NAME}=second",  # duplicates: the full parser decides
        f"{NAME}=",
        f"{NAME}=a b",
        f" {NAME} = {signed} ",
    ]
    for header in cases:
        fast, slow = _both(header)
        assert fast == slow, header


_names = st.sampled_from([NAME, "other", f"x{NAME}", f"{NAME}x", "a", ""])
_values = st.text(alphabet=st.sampled_from('ab.-_=" ;%\\,\t' + NAME), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_names, _values), max_size=4), st.sampled_from(["; ", ";", " ; "]))
def test_fast_reader_matches_werkzeug(pairs: list[tuple[str, str]], separator: str) -> None:
    header = separator.join(f"{name}={value}" for name, value in pairs)
    fast, slow = _both(header)
    assert fast == slow, header
