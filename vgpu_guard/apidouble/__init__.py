"""An in-memory kube-apiserver (the API double) for ``simulate``, fast tests and ``sandbox``.

In-process side (what ``simulate`` and the controller's property tests load):

    Store                 object semantics, watch, CRDs (no HTTP)        store.py
    Frontend              authorize -> admission -> store (both doors)  frontend.py
    AdmissionChain        mutating/validating webhooks from the store    admission.py
    MemoryClusterClient   in-process ClusterClient                       client.py

HTTPS side (``vgpu_guard.apidouble.http``: the sandbox's fallback backend and the tests):

    serve_double()        HTTPS server + kubeconfig, async context, JSON  http/server.py

kubectl's and Helm's fidelity (protobuf, Tables, OpenAPI, strategic merge patch, server-side apply,
impersonation) is not imitated: the real control plane proves it, and the double refuses those in
kube-apiserver's Status form.

Importing this package loads nothing: each name below is imported from its module on first use
(module ``__getattr__``), so ``import vgpu_guard.apidouble.store`` never pays for the HTTP side
(aiohttp's server, cryptography). What it serves and refuses: docs/apidouble.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vgpu_guard.apidouble.admission import AdmissionChain
    from vgpu_guard.apidouble.frontend import Frontend, Written
    from vgpu_guard.apidouble.http.server import RunningDouble, serve_double, write_kubeconfig
    from vgpu_guard.apidouble.identity import ADMIN, UserInfo, service_account
    from vgpu_guard.apidouble.store import Pending, Store, Watch

_HOME = {
    "ADMIN": "identity",
    "AdmissionChain": "admission",
    "Frontend": "frontend",
    "Pending": "store",
    "RunningDouble": "http.server",
    "Store": "store",
    "UserInfo": "identity",
    "Watch": "store",
    "Written": "frontend",
    "serve_double": "http.server",
    "service_account": "identity",
    "write_kubeconfig": "http.server",
}

__all__ = [
    "ADMIN",
    "AdmissionChain",
    "Frontend",
    "Pending",
    "RunningDouble",
    "Store",
    "UserInfo",
    "Watch",
    "Written",
    "serve_double",
    "service_account",
    "write_kubeconfig",
]


if not TYPE_CHECKING:  # type checkers see the imports above, so a misspelt name stays an error

    def __getattr__(name: str) -> Any:
        """The public name from its module, imported now (PEP 562): the package itself stays light."""
        home = _HOME.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__name__}.{home}"), name)
