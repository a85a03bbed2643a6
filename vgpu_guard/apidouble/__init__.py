"""An in-memory kube-apiserver (the API double) for tests, ``simulate`` and ``sandbox``."""
