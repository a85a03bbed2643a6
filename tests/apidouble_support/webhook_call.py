"""One HTTPS call to an admission webhook, as the API server's webhook client makes it.

Where to send it (``clientConfig.url``, or a ``service`` mapped to a loopback address, with the
server name ``SERVICE.NAMESPACE.svc``), which AdmissionReview version (the first the webhook lists
that the server knows), TLS against ``caBundle``, ``timeoutSeconds``, and what makes an answer a
call error (request/admissionreview.go VerifyAdmissionResponse); call errors are then subject to
the webhook's failurePolicy, which the chain applies.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from urllib.parse import urlparse

import aiohttp

from tests.apidouble_support.webhook_match import Hook
from vgpu_guard.apidouble._values import Obj

__all__ = ["WebhookCallError", "WebhookCaller"]


class WebhookCallError(Exception):
    """Raised when a webhook could not be called or answered nonsense (subject to failurePolicy)."""


class WebhookCaller:
    """Posts AdmissionReviews; one aiohttp session and one SSL context per caBundle, reused.

    ``services`` maps ``(namespace, name, port)`` of a ``clientConfig.service`` to the loopback
    ``host:port`` where that webhook really listens (the double has no Services or Endpoints)."""

    def __init__(self, services: dict[tuple[str, str, int], str]):
        self.services = services
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, hook: Hook, request: Obj) -> Obj:
        """The webhook's verified ``response`` to ``request``; ``WebhookCallError`` otherwise."""
        cc = hook.spec.get("clientConfig") or {}
        timeout = int(hook.spec.get("timeoutSeconds", 10))
        api_version = f"admission.k8s.io/{_review_version(hook)}"
        target, server_name = self._endpoint(cc)
        sep = "&" if "?" in target else "?"
        target = f"{target}{sep}timeout={timeout}s"
        body = {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}
        data = await self._send(target, body, self._ssl(str(cc.get("caBundle") or "")), server_name, timeout)
        try:
            review = json.loads(data)
        except ValueError as e:
            raise WebhookCallError(f"received invalid webhook response: {e}") from e
        if not isinstance(review, dict):
            raise WebhookCallError("received invalid webhook response: not an AdmissionReview")
        try:
            return _verified(review, request["uid"], api_version, mutating=hook.mutating)
        except WebhookCallError as e:  # the wording of later releases (1.20 gives only the reason)
            raise WebhookCallError(f"received invalid webhook response: {e}") from e

    def _endpoint(self, cc: Obj) -> tuple[str, str]:
        """The URL to post to and the TLS server name to verify."""
        if cc.get("url"):
            url = str(cc["url"])
            return url, urlparse(url).hostname or ""
        svc = cc.get("service") or {}
        key = (str(svc.get("namespace")), str(svc.get("name")), int(svc.get("port", 443)))
        address = self.services.get(key)
        if address is None:
            raise WebhookCallError(
                f"failed to call webhook: service {key[0]}/{key[1]}:{key[2]} is not mapped to a loopback "
                "address in the API double (AdmissionChain.services)"
            )
        return f"https://{address}{svc.get('path') or ''}", f"{key[1]}.{key[0]}.svc"

    async def _send(
        self, target: str, body: Obj, ctx: ssl.SSLContext, server_name: str, seconds: int
    ) -> bytes:
        """POST ``body``; the response bytes of a 200, a call error for anything else."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                target,
                json=body,
                ssl=ctx,
                server_hostname=server_name,
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise WebhookCallError(
                        f"failed to call webhook: the server responded with the status code {resp.status} "
                        f"but did not return more information"
                    )
                return data
        except TimeoutError as e:
            raise WebhookCallError(
                f'failed to call webhook: Post "{target}": context deadline exceeded'
            ) from e
        except aiohttp.ClientError as e:
            raise WebhookCallError(f'failed to call webhook: Post "{target}": {e}') from e

    def _ssl(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._contexts.get(ca_bundle)
        if ctx is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle, validate=True).decode()
                except (ValueError, binascii.Error) as e:
                    raise WebhookCallError(f"caBundle is not base64-encoded PEM: {e}") from e
                try:
                    ctx = ssl.create_default_context(cadata=pem)
                except ssl.SSLError as e:
                    raise WebhookCallError(f"caBundle does not hold a usable certificate: {e}") from e
            else:
                ctx = ssl.create_default_context()
            self._contexts[ca_bundle] = ctx
        return ctx


def _review_version(hook: Hook) -> str:
    """request/admissionreview.go CreateAdmissionObjects: the first version the webhook lists."""
    review_version = next(
        (v for v in hook.spec.get("admissionReviewVersions") or [] if v in ("v1", "v1beta1")), None
    )
    if review_version is None:
        raise WebhookCallError("webhook does not accept known AdmissionReview versions (v1, v1beta1)")
    return str(review_version)


def _verified(review: Obj, uid: str, api_version: str, *, mutating: bool) -> Obj:
    """request/admissionreview.go VerifyAdmissionResponse: the response, or a call error."""
    response = review.get("response")
    if not isinstance(response, dict):
        raise WebhookCallError("webhook response was absent")
    response = dict(response)
    if api_version.endswith("/v1beta1"):  # neither uid nor kind checked; a patch is a JSONPatch
        if not mutating:
            response.pop("patch", None)
        elif response.get("patch"):
            response["patchType"] = "JSONPatch"
        return response
    if response.get("uid") != uid:
        raise WebhookCallError(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    got = (str(review.get("apiVersion") or ""), str(review.get("kind") or ""))
    if got != (api_version, "AdmissionReview"):
        group, _, version = got[0].rpartition("/")
        raise WebhookCallError(
            f"expected webhook response of {api_version}, Kind=AdmissionReview, "
            f"got {group}/{version}, Kind={got[1]}"
        )
    has_patch, has_type = bool(response.get("patch")), response.get("patchType") is not None
    if mutating:
        if has_patch and not has_type:
            raise WebhookCallError("webhook returned response.patch but not response.patchType")
        if has_type and not has_patch:
            raise WebhookCallError("webhook returned response.patchType but not response.patch")
        if has_type and not response["patchType"]:
            raise WebhookCallError('webhook returned invalid response.patchType of ""')
    elif has_patch:
        raise WebhookCallError("validating webhook may not return response.patch")
    elif has_type:
        raise WebhookCallError("validating webhook may not return response.patchType")
    return response
