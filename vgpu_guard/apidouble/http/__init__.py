"""The API double over HTTPS: what the sandbox's fallback backend and the tests serve to API
clients (our processes, ``AioClusterClient``, the ``kubernetes`` client), JSON only.

    serve_double()   aiohttp server, TLS, bearer tokens, kubeconfig         server.py
    negotiation      JSON or kube-apiserver's 406 (_negotiate); the serving certificate (_tls)

kubectl and Helm need the real backend for what they ask beyond JSON (protobuf, Tables, OpenAPI,
strategic merge patch, server-side apply, impersonation): the double refuses it (docs/apidouble.md).

It sits above the in-process double (store, frontend, admission, client) and nothing there imports
it: ``simulate`` never loads it (the import-linter contract ``double-core-below-http`` and
tests/apidouble/test_layering.py keep it so).
"""
