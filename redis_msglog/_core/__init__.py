"""The I/O-free core of a log (sans-I/O): everything a log does, as plans of Redis
commands; it imports no redis-py, directly or through another module."""
