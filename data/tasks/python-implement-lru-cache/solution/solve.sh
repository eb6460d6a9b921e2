#!/bin/bash
set -euo pipefail
cat > /workspace/lru.py <<'PY'
"""A least-recently-used cache."""
from collections import OrderedDict


class LRUCache:
    """Fixed-capacity mapping that evicts the least recently used entry."""

    def __init__(self, capacity):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError("capacity must be an int >= 1")
        self._capacity = capacity
        self._data = OrderedDict()
        self._hits = self._misses = self._evictions = 0

    def get(self, key, default=None):
        try:
            value = self._data[key]
        except KeyError:
            self._misses += 1
            return default
        self._data.move_to_end(key)
        self._hits += 1
        return value

    def put(self, key, value):
        if key in self._data:
            self._data[key] = value
            self._data.move_to_end(key)
            return None
        self._data[key] = value
        if len(self._data) > self._capacity:
            self._evictions += 1
            return self._data.popitem(last=False)
        return None

    def delete(self, key):
        if key in self._data:
            del self._data[key]
            return True
        return False

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def keys(self):
        return list(self._data)

    def stats(self):
        return {"hits": self._hits, "misses": self._misses, "evictions": self._evictions}
PY
