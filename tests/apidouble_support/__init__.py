"""What tests plug into the API double, kept out of the product.

The double (``vgpu_guard.apidouble``) has two typed hooks and ships nothing behind them:
``Frontend.authorizer`` / ``serve_double(authorizer=...)`` (an ``Authorizer``: ``rbac.py`` here)
and ``MemoryClusterClient(faults=...)`` (a ``Faults``: ``faults.py`` here). ``simulate`` runs
without either: no authorization, no injected faults. The HTTPS side (``http/``) and the calls of
stored webhook configurations (``admission.py``, ``webhook_match.py``, ``webhook_call.py``) are
here too: no product path runs them.
"""
