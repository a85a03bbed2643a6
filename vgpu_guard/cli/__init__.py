"""The ``vgpu-guard`` command line: review, simulate, serve, certs, sandbox."""
