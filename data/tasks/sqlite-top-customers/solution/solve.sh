#!/bin/bash
set -euo pipefail
cat > /workspace/top_customers.sql <<'SQL'
-- Best customer per country by 2023 spending on shipped/delivered orders.
WITH qualifying AS (
    SELECT o.id, o.customer_id
    FROM orders AS o
    WHERE o.status IN ('shipped', 'delivered')
      AND o.ordered_at >= '2023-01-01 00:00:00'
      AND o.ordered_at <= '2023-12-31 23:59:59'
),
spend AS (
    SELECT q.customer_id,
           COUNT(DISTINCT q.id) AS orders,
           SUM(i.quantity * i.unit_price_cents) AS cents
    FROM qualifying AS q
    JOIN order_items AS i ON i.order_id = q.id
    GROUP BY q.customer_id
),
ranked AS (
    SELECT c.country, c.name, s.orders, s.cents,
           ROW_NUMBER() OVER (PARTITION BY c.country ORDER BY s.cents DESC, c.id ASC) AS rn
    FROM spend AS s
    JOIN customers AS c ON c.id = s.customer_id
)
SELECT country, name AS customer, orders,
       printf('%d.%02d', cents / 100, cents % 100) AS total
FROM ranked
WHERE rn = 1
ORDER BY country;
SQL
