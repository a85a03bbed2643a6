"""vgpu-guard: admission webhook and policy controller for Volcano vGPU clusters.

Layers (enforced by import-linter, see .importlinter):

    cli / webhook / controller / certs   shells: HTTP, TLS, watches, process lifecycle
    kube                                 the one seam to the API server (ClusterClient)
    apidouble                            an in-memory kube-apiserver for simulate and the tests
    engine                               pure decisions: no I/O, no clock, no network
"""

__version__ = "0.1.0"
