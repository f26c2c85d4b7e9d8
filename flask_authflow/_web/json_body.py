"""The JSON body of a request to the package's views: parsed once, within bounds.

Python's ``json`` recurses once per nesting level, so a small body of 20,000 ``[`` ends in
a ``RecursionError`` (a 500) wherever it is parsed. Every reader of a JSON body in the
views (the CSRF token, the form fields, the account flows) reads :func:`json_body`, which
refuses a body over :data:`MAX_JSON_BYTES` or nested deeper than :data:`MAX_JSON_DEPTH`
before ``json`` sees it; :func:`refuse_bad_json` (a ``before_request`` of the package's
blueprints) answers such a body ``400 invalid_input`` before the view runs.

An application's ``MAX_CONTENT_LENGTH`` applies first: a body over it is Werkzeug's 413.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Response, request

from flask_authflow._responses import error_response
from flask_authflow._web.per_request import keep_for_request, request_kept
from flask_authflow.errors import InvalidInput

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_body", "refuse_bad_json"]

#: The largest JSON body the views read (a WebAuthn response is at most 16 KiB).
MAX_JSON_BYTES = 64 * 1024
#: The deepest nesting of arrays and objects the views read (theirs is at most 4).
MAX_JSON_DEPTH = 32

_G_KEY = "_authflow_json_body"
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _depth(text: str) -> int:
    """How deep arrays and objects nest in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for char in _STRINGS.sub("", text):
        step = _BRACKETS.get(ord(char), 0)
        depth += step
        deepest = max(deepest, depth)
    return deepest


def _parse() -> Any:
    if request.content_length is not None and request.content_length > MAX_JSON_BYTES:
        raise InvalidInput("the JSON body is too large")
    data = request.get_data(cache=True)
    if len(data) > MAX_JSON_BYTES:  # a chunked body has no Content-Length
        raise InvalidInput("the JSON body is too large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the JSON body is not UTF-8") from None
    if _depth(text) > MAX_JSON_DEPTH:
        raise InvalidInput("the JSON body is nested too deeply")
    try:
        body = json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):
        raise InvalidInput("the body is not valid JSON") from None
    return body


def json_body() -> Any:
    """The request's JSON value (``None`` for a request without a JSON body).

    :class:`~flask_authflow.errors.InvalidInput` when it is too large, too deep or not
    JSON at all; parsed once per request.
    """
    if not request.is_json:
        return None
    value = request_kept(_G_KEY)  # never another request's body (one g may serve several)
    if value is None:
        try:
            value = _parse()
        except InvalidInput as error:
            value = error
        keep_for_request(_G_KEY, value)
    if isinstance(value, InvalidInput):
        raise value
    return value


def refuse_bad_json() -> Response | None:
    """``before_request`` of the package's blueprints: a JSON body the views would refuse
    answers ``400 invalid_input`` (JSON) before any view or CSRF check reads it."""
    if not request.is_json:
        return None
    try:
        json_body()
    except InvalidInput as error:
        return error_response(error)
    return None
