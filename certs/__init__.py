"""Serving certificates: self-signed CA, renewal, hot reload, caBundle injection."""
