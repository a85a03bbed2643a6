"""An in-memory kube-apiserver (the API double) for tests, ``simulate`` and ``sandbox``.

    Store                 object semantics, watch, CRDs (no HTTP)        store.py
    Frontend              authorize -> admission -> store (both doors)  frontend.py
    AdmissionChain        mutating/validating webhooks from the store    admission.py
    RBACAuthorizer        Roles/ClusterRoles/bindings from the store     rbac.py
    serve_double()        HTTPS server + kubeconfig, async context       server.py
    MemoryClusterClient   in-process ClusterClient (vgpu_guard.apidouble.client)

What it serves and refuses: docs/apidouble.md.
"""

from vgpu_guard.apidouble.admission import AdmissionChain
from vgpu_guard.apidouble.frontend import Frontend, Written
from vgpu_guard.apidouble.identity import ADMIN, UserInfo, service_account
from vgpu_guard.apidouble.rbac import RBACAuthorizer
from vgpu_guard.apidouble.server import RunningDouble, serve_double, write_kubeconfig
from vgpu_guard.apidouble.store import Pending, Store, Watch

__all__ = [
    "ADMIN",
    "AdmissionChain",
    "Frontend",
    "Pending",
    "RBACAuthorizer",
    "RunningDouble",
    "Store",
    "UserInfo",
    "Watch",
    "Written",
    "serve_double",
    "service_account",
    "write_kubeconfig",
]
