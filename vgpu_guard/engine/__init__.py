"""The pure decision core shared by the webhook, the controller, ``review`` and ``simulate``.

Nothing here does I/O, reads a clock, or imports aiohttp or the kubernetes client (enforced by
import-linter): every input arrives as an argument (a ``ClusterView`` snapshot, the config, the
object under review), every output is a value (violations, patch operations, placements).
"""
