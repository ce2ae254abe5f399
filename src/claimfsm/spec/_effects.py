"""What an event may write besides the state: the effects a declaration chooses from, with
the row column each sets and the caller's fact it takes the value from. stdlib only.

- ``lease``: the lease deadline becomes now + the caller's lease seconds.
- ``outcome``: the row records the caller's evidence (readback's ``present`` or ``absent``),
  until a taker's new epoch clears it: the claim row's, or a lifecycle's with a remote.
- ``owner``: the row's owner becomes the caller.
- ``fresh_token``: a new owner token (its hash): every earlier handle becomes stale.
- ``fresh_key``: a new idempotency key: a request sent after it is a new request to the
  remote, which a deduping remote cannot match with an earlier one. The claim row's key,
  or, for a lifecycle of your own with a remote, the entity's request key (until an event
  draws one, its requests carry the entity's key).

``durable`` on an event marks its commit as one that must survive power loss (the claim's
``begin_send`` and ``retry``: after them an external call may happen at any moment).
"""

from __future__ import annotations

#: effect -> (the row column it sets, the Facts field its value comes from)
EFFECTS: dict[str, tuple[str, str]] = {
    "lease": ("lease_deadline", "lease_deadline"),
    "outcome": ("outcome", "outcome"),
    "owner": ("owner", "owner"),
    "fresh_token": ("token_hash", "new_token_hash"),
    "fresh_key": ("idempotency_key", "new_idempotency_key"),
}
