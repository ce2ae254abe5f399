"""Owner tokens: secret capabilities. Stores keep only their hash; output shows a fingerprint.
Fresh idempotency keys, which are not secrets: every request to the remote shows one."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32  # 256 random bits
TOKEN_LENGTH = 43  # len(secrets.token_urlsafe(32))
FINGERPRINT_LENGTH = 8


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    # A fast hash is enough: the token has 256 random bits, so there is nothing to brute-force.
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def fingerprint(hashed: str | None) -> str:
    """A short, non-secret label for a token (a prefix of its hash)."""
    return hashed[:FINGERPRINT_LENGTH] if hashed else "-"


def fresh_idempotency_key() -> str:
    """A key no earlier request used: what a request sent after an event declared
    ``fresh_key`` carries (the claim's retry; a lifecycle's request key)."""
    return f"cf-fresh-{secrets.token_hex(16)}"


def content_digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()
