"""The HTTP service: the aiohttp app, its handlers, metrics, TLS and the serve wiring."""
