import csv
import io
import os
import random
import sqlite3
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

QUERY = "/workspace/top_customers.sql"
SAMPLE_SQL = "/workspace/shop.sql"
SCHEMA = """-- Sample shop database. Build it with:  sqlite3 shop.db < shop.sql
PRAGMA foreign_keys = ON;
CREATE TABLE customers (
    id      INTEGER PRIMARY KEY,
    name    TEXT NOT NULL,
    country TEXT NOT NULL
);
CREATE TABLE products (
    id          INTEGER PRIMARY KEY,
    title       TEXT NOT NULL,
    price_cents INTEGER NOT NULL
);
CREATE TABLE orders (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    ordered_at  TEXT NOT NULL,          -- 'YYYY-MM-DD HH:MM:SS' (UTC)
    status      TEXT NOT NULL           -- 'pending', 'shipped', 'delivered', 'cancelled', 'returned'
);
CREATE TABLE order_items (
    order_id         INTEGER NOT NULL REFERENCES orders(id),
    product_id       INTEGER NOT NULL REFERENCES products(id),
    quantity         INTEGER NOT NULL,
    unit_price_cents INTEGER NOT NULL   -- price actually charged, may differ from products.price_cents
);
"""


def schema_only():
    return SCHEMA


def build_db(path, seed):
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.executescript(schema_only())
    countries = ["AT", "CH", "DE", "FR", "NZ", "US", "ZA"]
    customers = []
    for cid in range(1, 41):
        name = rng.choice(["Ann", "Bob", "Chloé", "D'Arcy", "Eve, Sr.", 'Q "Quote"']) + f" {cid}"
        customers.append((cid, name, rng.choice(countries)))
    con.executemany("INSERT INTO customers VALUES (?,?,?)", customers)
    con.executemany("INSERT INTO products VALUES (?,?,?)",
                    [(p, f"P{p}", rng.randint(1, 5000)) for p in range(1, 11)])
    stamps = ["2022-12-31 23:59:59", "2023-01-01 00:00:00", "2023-06-15 12:00:00",
              "2023-12-31 23:59:59", "2024-01-01 00:00:00"]
    oid = 0
    orders, items = [], []
    for _ in range(300):
        oid += 1
        when = rng.choice(stamps + [f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} 08:00:00"] * 3)
        status = rng.choice(["pending", "shipped", "delivered", "delivered", "cancelled", "returned"])
        # customer 40 never qualifies; NZ customers never order
        cid = rng.choice([c for c in customers if c[2] != "NZ"])[0]
        orders.append((oid, cid, when, status))
        for _ in range(rng.randint(1, 3)):
            items.append((oid, rng.randint(1, 10), rng.randint(1, 4), rng.choice([0, 5, 99, 1000, 12345])))
    # a deliberate tie in one country: two fresh customers with identical spend
    con.executemany("INSERT INTO customers VALUES (?,?,?)", [(41, "Tie Later", "ZZ"), (42, "Tie Earlier", "ZZ")])
    for cid in (41, 42):
        oid += 1
        orders.append((oid, cid, "2023-03-03 03:03:03", "shipped"))
        items.append((oid, 1, 2, 5000))
    con.executemany("INSERT INTO orders VALUES (?,?,?,?)", orders)
    con.executemany("INSERT INTO order_items VALUES (?,?,?,?)", items)
    con.commit()
    con.close()
    return customers + [(41, "Tie Later", "ZZ"), (42, "Tie Earlier", "ZZ")], orders, items


def expected(customers, orders, items):
    by_order = {}
    for oid, pid, q, price in items:
        by_order[oid] = by_order.get(oid, 0) + q * price
    spend = {}
    for oid, cid, when, status in orders:
        if status in ("shipped", "delivered") and "2023-01-01 00:00:00" <= when <= "2023-12-31 23:59:59":
            s = spend.setdefault(cid, [0, 0])
            s[0] += 1
            s[1] += by_order[oid]
    best = {}
    for cid, name, country in sorted(customers):
        if cid in spend:
            cur = best.get(country)
            if cur is None or spend[cid][1] > cur[3]:
                best[country] = (country, name, spend[cid][0], spend[cid][1])
    return [[c, n, str(o), f"{cents // 100}.{cents % 100:02d}"] for c, n, o, cents in sorted(best.values())]


def run_query(db):
    with open(QUERY, "rb") as f:
        r = subprocess.run(["sqlite3", "-csv", str(db)], stdin=f, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b"", r.stderr.decode()
    return list(csv.reader(io.StringIO(r.stdout.decode("utf-8"))))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_hidden_databases(tmp_path, seed):
    db = tmp_path / "shop.db"
    data = build_db(str(db), seed)
    before = db.read_bytes()
    assert run_query(db) == expected(*data)
    assert db.read_bytes() == before, "the query modified the database"


def test_sample_database(tmp_path):
    db = tmp_path / "sample.db"
    con = sqlite3.connect(db)
    with open(SAMPLE_SQL) as f:
        con.executescript(f.read())
    customers = con.execute("SELECT id, name, country FROM customers").fetchall()
    orders = con.execute("SELECT id, customer_id, ordered_at, status FROM orders").fetchall()
    items = con.execute("SELECT order_id, product_id, quantity, unit_price_cents FROM order_items").fetchall()
    con.close()
    assert run_query(db) == expected(customers, orders, items)


def test_empty_database(tmp_path):
    db = tmp_path / "empty.db"
    con = sqlite3.connect(db)
    con.executescript(schema_only())
    con.close()
    assert run_query(db) == []
