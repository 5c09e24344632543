-- The service's MariaDB statements (the workload's own database, not run.db: the run directory's SQL
-- lives in rundir/). Read by harness/service/tiers.py (schema) and app.py (the queries), by name.
-- name: schema
CREATE DATABASE nestlab;
CREATE TABLE nestlab.items (id INT PRIMARY KEY, value VARCHAR(64) NOT NULL, writes INT NOT NULL DEFAULT 0);
INSERT INTO nestlab.items (id, value) WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < {last})
    SELECT n, CONCAT('value-', n) FROM s;
-- name: app_account
CREATE USER '{user}'@'%' IDENTIFIED BY '{password}';
GRANT SELECT, UPDATE ON nestlab.items TO '{user}'@'%';
-- name: read_item
SELECT value FROM items WHERE id = %s
-- name: read_item_work
SELECT value, BENCHMARK(%s, MD5(value)) FROM items WHERE id = %s
-- name: write_item
UPDATE items SET value = %s, writes = writes + 1 WHERE id = %s
