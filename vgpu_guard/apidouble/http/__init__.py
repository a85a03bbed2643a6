"""The API double over HTTPS: what the sandbox's fallback backend and the tests serve to real
clients (our processes, the ``kubernetes`` client, kubectl, Helm).

    serve_double()   aiohttp server, TLS, bearer tokens, kubeconfig         server.py
    RBACAuthorizer   authorization from Roles/ClusterRoles/bindings          rbac.py
    kubectl/Helm     content negotiation (_negotiate), Tables (_tables, _printers), OpenAPI v2
                     (_openapi, _openapi_pb), protobuf bodies (_protobuf), server-side apply
                     (_apply), impersonation (_impersonation), the serving certificate (_tls)

It sits above the in-process double (store, frontend, admission, client) and nothing there imports
it: ``simulate`` never loads it (the import-linter contract ``double-core-below-http`` and
tests/apidouble/test_layering.py keep it so).
"""
