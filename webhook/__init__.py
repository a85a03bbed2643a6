"""The admission webhook shell: aiohttp over HTTPS, decode -> engine -> encode, metrics, audit."""
