"""A request body read as JSON by the server itself, so that every way it can be wrong is a 422 with
one line saying where: bytes that are not UTF-8 (the byte offset), text that is not JSON (line,
column and character), nesting deeper than the limit (the character where it goes too deep), ``NaN``
or ``Infinity`` (not JSON), a number too long for Python, and strings holding a lone surrogate
escape (``"\\ud800"``: not a character, and not encodable in the answer).

A body with a ``Content-Type`` other than JSON (``application/json``, ``application/*+json``) is
refused the same way; one without a ``Content-Type`` is read as JSON.
"""

from __future__ import annotations

import email.message
import json
import re
from typing import Any

JSON_CONTENT = "request body: send a JSON object with the header Content-Type: application/json"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # where a lone surrogate can come from
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)  # strings (skipped) and brackets


class BodyError(ValueError):
    """A body that cannot be read as a JSON value; the message is one line."""


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header says JSON (None: no header, read as JSON)."""
    if content_type is None:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def parse(body: bytes, max_depth: int) -> Any:
    """``body`` as a JSON value; :class:`BodyError` saying what is wrong and where."""
    if not body.strip():
        raise BodyError('request body: empty; send a JSON object such as {"text": "…"}')
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(
            f"request body: not UTF-8 at byte {exc.start} ({exc.reason}); send JSON encoded as UTF-8"
        ) from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise BodyError(
            f"request body: not valid JSON at character {exc.pos} (line {exc.lineno}, column "
            f"{exc.colno}): {exc.msg}"
        ) from None
    except RecursionError:
        raise BodyError(_too_deep(text, max_depth)) from None
    except ValueError as exc:  # NaN, Infinity; an integer of over 4,300 digits (Python's advice cut)
        raise BodyError(f"request body: not valid JSON ({str(exc).split(';')[0]})") from None
    if text.count("[") + text.count("{") > max_depth and _depth(value) > max_depth:
        raise BodyError(_too_deep(text, max_depth))
    if _SURROGATE_ESCAPE.search(text):
        _refuse_surrogates(value)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _depth(value: Any) -> int:
    """How deeply ``value``'s arrays and objects nest (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(text: str, max_depth: int) -> str:
    """The refusal of ``text`` nested deeper than ``max_depth``, naming the character where it is."""
    depth = 0
    for token in _TOKENS.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return (
                    f"request body: JSON nested deeper than {max_depth} levels at character {token.start()}"
                )
        elif bracket in ("]", "}"):
            depth -= 1
    return f"request body: JSON nested deeper than {max_depth} levels"


def _refuse_surrogates(value: Any) -> None:
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                where = path or "request body"
                raise BodyError(
                    f"{where}: a lone surrogate \\u{ord(found.group()):04x} is not a character; send "
                    "valid Unicode (a pair such as \\ud83d\\ude00 is fine)"
                )
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, path or "request body"))
                stack.append((child, f"{path}.{key}" if path else str(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{path}.{i}" if path else str(i)) for i, child in enumerate(item))
