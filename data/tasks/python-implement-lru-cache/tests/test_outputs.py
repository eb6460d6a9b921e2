import importlib.util
import random

import pytest


def load():
    spec = importlib.util.spec_from_file_location("lru_under_test", "/workspace/lru.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LRUCache


class Model:
    """Reference model: a plain list ordered least -> most recently used."""

    def __init__(self, cap):
        self.cap, self.items, self.h, self.m, self.e = cap, [], 0, 0, 0

    def _find(self, k):
        for i, (kk, _) in enumerate(self.items):
            if kk == k:
                return i
        return -1

    def get(self, k, default=None):
        i = self._find(k)
        if i < 0:
            self.m += 1
            return default
        self.h += 1
        self.items.append(self.items.pop(i))
        return self.items[-1][1]

    def put(self, k, v):
        i = self._find(k)
        if i >= 0:
            self.items.pop(i)
            self.items.append((k, v))
            return None
        self.items.append((k, v))
        if len(self.items) > self.cap:
            self.e += 1
            return self.items.pop(0)
        return None

    def delete(self, k):
        i = self._find(k)
        if i < 0:
            return False
        self.items.pop(i)
        return True


def test_basic_eviction_order():
    LRU = load()
    c = LRU(2)
    assert c.put("a", 1) is None
    assert c.put("b", 2) is None
    assert c.get("a") == 1
    assert c.put("c", 3) == ("b", 2)
    assert c.keys() == ["a", "c"]
    assert "b" not in c and len(c) == 2
    assert c.get("b", "dflt") == "dflt"
    assert c.put("a", 10) is None
    assert c.keys() == ["c", "a"]
    assert c.stats() == {"hits": 1, "misses": 1, "evictions": 1}


def test_contains_does_not_touch_recency():
    LRU = load()
    c = LRU(2)
    c.put(1, "x")
    c.put(2, "y")
    assert 1 in c
    assert c.put(3, "z") == (1, "x")


def test_delete():
    LRU = load()
    c = LRU(3)
    c.put("k", None)
    assert "k" in c
    assert c.get("k", 5) is None
    assert c.delete("k") is True
    assert c.delete("k") is False
    assert len(c) == 0 and c.keys() == []


@pytest.mark.parametrize("bad", [0, -3, 1.5, "3", None, True])
def test_bad_capacity(bad):
    LRU = load()
    with pytest.raises(ValueError):
        LRU(bad)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_against_model(seed):
    LRU = load()
    rng = random.Random(seed)
    cap = rng.randint(1, 12)
    c, m = LRU(cap), Model(cap)
    for _ in range(3000):
        op = rng.random()
        k = rng.randint(0, 25)
        if op < 0.45:
            v = rng.randint(0, 999)
            assert c.put(k, v) == m.put(k, v)
        elif op < 0.85:
            assert c.get(k, -1) == m.get(k, -1)
        elif op < 0.95:
            assert c.delete(k) == m.delete(k)
        else:
            assert (k in c) == (m._find(k) >= 0)
        assert len(c) == len(m.items)
    assert c.keys() == [k for k, _ in m.items]
    assert c.stats() == {"hits": m.h, "misses": m.m, "evictions": m.e}


class CountedKey:
    """A key that counts how often the cache hashes or compares it: the work it does on keys."""

    work = 0
    budget = None
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    @classmethod
    def count(cls):
        cls.work += 1
        if cls.budget is not None and cls.work > cls.budget:
            raise AssertionError("more than %d key hashes and comparisons: the work grows with the cache" % cls.budget)

    def __hash__(self):
        CountedKey.count()
        return hash(self.v)

    def __eq__(self, other):
        CountedKey.count()
        return isinstance(other, CountedKey) and self.v == other.v

    def __repr__(self):
        return "CountedKey(%r)" % (self.v,)


def work_per_operation(n, ops=2000):
    """Key hashes and comparisons per operation on a cache of n entries (get, in, update, then
    puts that evict). O(1) operations do the same few per operation at any n; a scan of the
    entries does about n/2."""
    LRU = load()
    c = LRU(n)
    keys = [CountedKey(i) for i in range(n + ops)]
    CountedKey.budget = None
    for k in keys[:n]:
        c.put(k, k.v)
    rng = random.Random(n)
    picks = [keys[rng.randrange(n)] for _ in range(ops)]
    CountedKey.work, CountedKey.budget = 0, 50 * 4 * ops
    try:
        for k in picks:
            assert c.get(k) == k.v
            assert k in c
            assert c.put(k, k.v) is None
        for i in range(ops):  # every put evicts the least recently used: the untouched first keys, then the picks
            assert c.put(keys[n + i], n + i) is not None
        assert len(c) == n
        return CountedKey.work / (4 * ops)
    finally:
        CountedKey.budget = None


def test_work_per_operation_does_not_grow_with_the_cache():
    small, large = work_per_operation(100), work_per_operation(20000)
    assert large <= 2 * small + 2, "%.1f key operations per cache operation at 20,000 entries, %.1f at 100" % (large, small)
