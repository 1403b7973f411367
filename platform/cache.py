"""Django's Redis cache with one client per connection pool.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache operation, and redis-py's
constructor builds its table of response callbacks each time. An API call that is throttled and reads its
cached permissions makes three cache operations, so on the trace lookup (the API's hot path) that came to
about a tenth of the request. A `redis.Redis` is safe to share between threads (it takes a connection from
its pool per command), and redis-py's pool starts afresh in a forked child, so one client per pool is enough.
"""

from __future__ import annotations

from django.core.cache.backends import redis as django_redis


class _PooledClient(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)  # (the pools live as long as this client)
        client = self._clients.get(pool)
        if client is None:
            client = self._clients[pool] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    """settings.CACHES backend: `control_plane.cache.RedisCache` (same options as Django's)."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = _PooledClient
