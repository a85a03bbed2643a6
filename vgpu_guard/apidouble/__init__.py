"""An in-memory kube-apiserver (the API double) for ``simulate`` and fast tests.

    Store                 object semantics, watch, CRDs (no HTTP)        store.py
    Frontend              authorize -> admission -> store                frontend.py
    MemoryClusterClient   in-process ClusterClient                       client.py

Only ``simulate`` runs it in the product, with its in-process arbiter as the admission seam
(``Frontend(admission=...)``). The tests also serve it over HTTPS and call stored webhook
configurations (``tests/apidouble_support/``: ``http/``, ``admission.py``; the e2e suite's
``double`` backend, the contract suite); kubectl's and Helm's fidelity is proven on the real
control plane, never imitated.

Importing this package loads nothing: each name below is imported from its module on first use
(module ``__getattr__``), so ``import vgpu_guard.apidouble.store`` loads only what the store needs.
What it serves and refuses: docs/apidouble.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vgpu_guard.apidouble.frontend import Frontend, Written
    from vgpu_guard.apidouble.identity import ADMIN, UserInfo, service_account
    from vgpu_guard.apidouble.store import Pending, Store, Watch

_HOME = {
    "ADMIN": "identity",
    "Frontend": "frontend",
    "Pending": "store",
    "Store": "store",
    "UserInfo": "identity",
    "Watch": "store",
    "Written": "frontend",
    "service_account": "identity",
}

__all__ = [
    "ADMIN",
    "Frontend",
    "Pending",
    "Store",
    "UserInfo",
    "Watch",
    "Written",
    "service_account",
]


if not TYPE_CHECKING:  # type checkers see the imports above, so a misspelt name stays an error

    def __getattr__(name: str) -> Any:
        """The public name from its module, imported now (PEP 562): the package itself stays light."""
        home = _HOME.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__name__}.{home}"), name)
