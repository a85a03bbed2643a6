"""The webhook fixtures (trustme CA, a running webhook over TLS) shared with tests/webhook."""

from tests.webhook.conftest import ca, client_ssl, config, server_ssl, views, webhook

__all__ = ["ca", "client_ssl", "config", "server_ssl", "views", "webhook"]
