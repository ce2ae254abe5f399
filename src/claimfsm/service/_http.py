"""A ``Remote`` adapter over HTTP, on httpx: ``pip install 'claimfsm[http]'``.

The receiving service implements three endpoints under a base URL (the whole contract,
for the team that builds it, is in docs/remote-adapters.md):

- ``POST {base}/targets/{target}/effects``, headers ``Idempotency-Key`` and
  ``Claimfsm-Epoch`` (the fencing token), JSON body ``{"draft_id", "content"}``:
  2xx once the effect is applied (or, deduplicating, was already applied under that key);
  409 when the epoch is fenced; any other 4xx for a request it refused without applying.
- ``GET {base}/targets/{target}/effects/{key}``: 200 if the effect of ``key`` is present,
  404 if not; it must see every effect applied before it was asked.
- ``POST {base}/targets/{target}/fence``, header ``Claimfsm-Epoch``: from now on reject
  every send at that epoch or below; answer 2xx only once none can still land.

What the adapter tells the Dispatcher: a 2xx send returns (confirm). A 409 or other 4xx
raises ``SendRejected``; a 5xx, a timeout, a reset or a lost response raises
``SendAmbiguous``; either way the claim becomes uncertain and readback decides. Readback
and fence raise ``RemoteUnavailable`` when they get no definite answer, and the claim
stays uncertain until a later reconcile.

``HttpRemote`` (an ``httpx.Client``) and ``AsyncHttpRemote`` (an ``httpx.AsyncClient``, for
``AsyncDispatcher``) share all of the above: each builds the same requests and reads the
answers with the same functions; only the client call differs.
"""

from __future__ import annotations

from typing import Any, NoReturn
from urllib.parse import quote

from claimfsm.errors import InvalidArgument
from claimfsm.service._remote import SendAmbiguous, SendRejected, SendRequest

try:
    import httpx
except ImportError:  # pragma: no cover - exercised only without the extra
    httpx = None  # type: ignore[assignment]


class RemoteUnavailable(Exception):
    """The remote gave no definite answer to a readback or a fence."""


class _HttpContract:
    """The contract's requests and the meaning of its answers, for both faces."""

    def __init__(
        self,
        base_url: str,
        *,
        fences_epochs: bool,
        dedups_by_key: bool,
        timeout: float,
        client: Any,
        client_class: str,
    ) -> None:
        if httpx is None:
            raise InvalidArgument(
                f"{type(self).__name__} needs the 'http' extra: pip install 'claimfsm[http]'"
            )
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url must be an http:// or https:// URL, not {base_url!r}")
        for name, flag in (("fences_epochs", fences_epochs), ("dedups_by_key", dedups_by_key)):
            if not isinstance(flag, bool):
                raise InvalidArgument(f"{name} must be True or False, not {flag!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidArgument(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self.fences_epochs = fences_epochs
        self.dedups_by_key = dedups_by_key
        self.timeout = float(timeout)
        # httpx.Client or httpx.AsyncClient; one the caller passed is left open on close
        self._client = (
            client if client is not None else getattr(httpx, client_class)(timeout=timeout)
        )
        self._owns_client = client is None

    def _url(self, target_id: str, *rest: str) -> str:
        parts = [quote(target_id, safe=""), *(quote(r, safe="") for r in rest)]
        return f"{self.base_url}/targets/" + "/".join(parts)

    def _send_call(self, request: SendRequest) -> dict[str, Any]:
        return {
            "url": self._url(request.target_id, "effects"),
            "headers": {
                "Idempotency-Key": request.idempotency_key,
                "Claimfsm-Epoch": str(request.epoch),
            },
            "json": {"draft_id": request.draft_id, "content": request.content},
            "timeout": self.timeout,
        }

    def _send_failed(self, exc: Exception) -> NoReturn:
        if isinstance(exc, httpx.TimeoutException):
            raise SendAmbiguous(f"no answer within {self.timeout:g} s: {exc!r}") from exc
        raise SendAmbiguous(f"the connection failed: {exc!r}") from exc  # reset, refused

    def _sent(self, request: SendRequest, response: Any) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        if status == 409:
            raise SendRejected(f"epoch {request.epoch} is fenced at the remote (409)")
        if 400 <= status < 500:
            raise SendRejected(f"the remote refused the send ({status}): {response.text[:200]}")
        raise SendAmbiguous(f"the remote answered {status}; the effect may have been applied")

    def _readback_url(self, target_id: str, idempotency_key: str) -> str:
        return self._url(target_id, "effects", idempotency_key)

    def _readback_failed(self, idempotency_key: str, exc: Exception) -> NoReturn:
        raise RemoteUnavailable(f"readback of {idempotency_key!r} failed: {exc!r}") from exc

    def _read_back(self, idempotency_key: str, response: Any) -> bool:
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise RemoteUnavailable(f"readback of {idempotency_key!r} answered {response.status_code}")

    def _fence_call(self, target_id: str, epoch: int) -> dict[str, Any]:
        return {"url": self._url(target_id, "fence"), "headers": {"Claimfsm-Epoch": str(epoch)}}

    def _fence_failed(self, epoch: int, exc: Exception) -> NoReturn:
        raise RemoteUnavailable(f"fence of epoch {epoch} failed: {exc!r}") from exc

    def _fenced(self, epoch: int, response: Any) -> None:
        if not 200 <= response.status_code < 300:
            raise RemoteUnavailable(f"fence of epoch {epoch} answered {response.status_code}")


class HttpRemote(_HttpContract):
    """The HTTP remote contract (see the module) as a ``Remote`` adapter.

    ``fences_epochs`` and ``dedups_by_key`` must say what the receiving service really does:
    claimfsm's promise rests on them. ``timeout`` bounds every request (seconds). Pass a
    configured ``httpx.Client`` as ``client`` for TLS, authentication or a proxy (requests
    still go to ``base_url``; ``close()`` leaves a client it did not make open).
    """

    def __init__(
        self,
        base_url: str,
        *,
        fences_epochs: bool,
        dedups_by_key: bool,
        timeout: float = 10.0,
        client: Any = None,
    ) -> None:
        super().__init__(
            base_url,
            fences_epochs=fences_epochs,
            dedups_by_key=dedups_by_key,
            timeout=timeout,
            client=client,
            client_class="Client",
        )

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HttpRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Remote protocol ------------------------------------------------------------------
    def send(self, request: SendRequest) -> None:
        try:
            response = self._client.post(**self._send_call(request))
        except httpx.TransportError as exc:  # timeouts, resets, refused, no answer
            self._send_failed(exc)
        self._sent(request, response)

    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        try:
            response = self._client.get(self._readback_url(target_id, idempotency_key))
        except httpx.HTTPError as exc:
            self._readback_failed(idempotency_key, exc)
        return self._read_back(idempotency_key, response)

    def fence(self, target_id: str, epoch: int) -> None:
        try:
            response = self._client.post(**self._fence_call(target_id, epoch))
        except httpx.HTTPError as exc:
            self._fence_failed(epoch, exc)
        self._fenced(epoch, response)


class AsyncHttpRemote(_HttpContract):
    """The HTTP remote contract as an ``AsyncRemote`` adapter, on ``httpx.AsyncClient``
    (the arguments of ``HttpRemote``; ``client`` an ``httpx.AsyncClient``)."""

    def __init__(
        self,
        base_url: str,
        *,
        fences_epochs: bool,
        dedups_by_key: bool,
        timeout: float = 10.0,
        client: Any = None,
    ) -> None:
        super().__init__(
            base_url,
            fences_epochs=fences_epochs,
            dedups_by_key=dedups_by_key,
            timeout=timeout,
            client=client,
            client_class="AsyncClient",
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncHttpRemote:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the AsyncRemote protocol -------------------------------------------------------------
    async def send(self, request: SendRequest) -> None:
        try:
            response = await self._client.post(**self._send_call(request))
        except httpx.TransportError as exc:
            self._send_failed(exc)
        self._sent(request, response)

    async def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        try:
            response = await self._client.get(self._readback_url(target_id, idempotency_key))
        except httpx.HTTPError as exc:
            self._readback_failed(idempotency_key, exc)
        return self._read_back(idempotency_key, response)

    async def fence(self, target_id: str, epoch: int) -> None:
        try:
            response = await self._client.post(**self._fence_call(target_id, epoch))
        except httpx.HTTPError as exc:
            self._fence_failed(epoch, exc)
        self._fenced(epoch, response)
