"""The API double over HTTPS, for the tests: what the e2e suite's ``double`` backend and the contract
suite serve to API clients (our processes, ``AioClusterClient``, the ``kubernetes`` client), JSON only.

    serve_double()   aiohttp server, TLS, bearer tokens, kubeconfig         server.py
    negotiation      JSON or kube-apiserver's 406 (_negotiate); the serving certificate (_tls)

kubectl and Helm need a real API server for what they ask beyond JSON (protobuf, Tables, OpenAPI,
strategic merge patch, server-side apply, impersonation): the double refuses it (docs/apidouble.md).

It sits above the in-process double (store, frontend, client) and the tests' webhook calls
(``tests/apidouble_support/admission.py``); the product never imports it (the import-linter
contract ``product-below-tests``). It was the sandbox's fallback backend until issue 45: the sandbox
now runs the real control plane only (docs/apidouble.md says why).
"""
