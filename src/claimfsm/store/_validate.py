"""Up-front argument checks: a bad argument raises InvalidArgument before anything is written."""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any

from claimfsm.errors import InvalidArgument, NotFound
from claimfsm.store._tokens import TOKEN_LENGTH

MAX_ID_LENGTH = 200
MAX_CONTENT_BYTES = 1 << 20
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
MAX_INT = (1 << 63) - 1
MAX_REASON_LENGTH = 1000


def text_id(value: Any, what: str, *, max_length: int = MAX_ID_LENGTH) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}")
    if not value or len(value) > max_length:
        raise InvalidArgument(f"{what} must be 1 to {max_length} characters, got {len(value)}")
    _printable(value, what)
    return value


def content(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"content must be a str, not {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"content is not valid Unicode text: {exc.reason}") from None
    if size > MAX_CONTENT_BYTES:
        raise InvalidArgument(f"content is {size} bytes; the limit is {MAX_CONTENT_BYTES}")
    return value


def positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_INT:
        raise InvalidArgument(f"{what} must be between 1 and {MAX_INT}, got {value}")
    return value


def lease(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"lease_seconds must be a number, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_LEASE_SECONDS:
        raise InvalidArgument(
            f"lease_seconds must be a finite number above 0 and at most {MAX_LEASE_SECONDS:g},"
            f" got {value!r}"
        )
    return seconds


def duration(value: Any, what: str) -> float:
    """A finite, non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(
            f"{what} must be a finite number of seconds, 0 or more; got {value!r}"
        )
    return seconds


def token(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"token must be a str, not {type(value).__name__}")
    if len(value) != TOKEN_LENGTH or not value.isascii():
        raise InvalidArgument(
            f"token must be the {TOKEN_LENGTH}-character string a claim handle carries"
            " (Claim.token); this one is not"
        )
    return value


def reason(value: Any, what: str = "reason") -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}")
    if len(value) > MAX_REASON_LENGTH:
        raise InvalidArgument(f"{what} must be at most {MAX_REASON_LENGTH} characters")
    _printable(value, what, allow_empty=True)
    return value


def _printable(value: str, what: str, *, allow_empty: bool = False) -> None:
    if value.isascii() and value.isprintable():  # the common case, checked in C
        return
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise InvalidArgument(
                f"{what} contains a control character or unpaired surrogate ({ch!r}); "
                "use printable text"
            )


def database_file(path: Path) -> None:
    """A SQLite file that must exist already (a store opened to read, not to create)."""
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise InvalidArgument(f"cannot use {str(path)[:200]!r} as a database path: {exc}") from None
    if not found:
        raise NotFound(f"no database at {str(path)!r}; check the path")
