"""What tests plug into the API double, kept out of the product.

The double (``vgpu_guard.apidouble``) has two typed hooks and ships nothing behind them:
``Frontend.authorizer`` / ``serve_double(authorizer=...)`` (an ``Authorizer``: ``rbac.py`` here)
and ``MemoryClusterClient(faults=...)`` (a ``Faults``: ``faults.py`` here). ``simulate`` and
``vgpu-guard sandbox`` serve without either: no authorization, no injected faults.
"""
