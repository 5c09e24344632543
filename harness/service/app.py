"""The service's application tier: a small WSGI app served by gunicorn on app1 and app2.

    GET  /item/<key>   a read: a session lookup and the item in memcached; on a miss the item from
                       MariaDB, then stored in memcached (type `hit` or `miss`, as it really went)
    POST /item/<key>   a write: a session lookup, an UPDATE in MariaDB, the new value into memcached
    GET  /health       the tier check (no downstream call)

Each request's id comes in the X-Request-ID header (set by the load generator, passed on by nginx).
The app logs its own hop and each downstream call it makes, one line each, to
`<NESTLAB_SVC_HOPS>/hops-<host>-<pid>.tsv`: request id, type, tier, start, end, outcome, with
CLOCK_MONOTONIC times (the host's clock: every Mininet namespace shares it). A downstream hop is
timed at the caller, from sending the call to receiving its answer.

Runs under Debian's gunicorn on /usr/bin/python3: standard library, pymemcache and pymysql only.
"""

from __future__ import annotations

import os
import threading
import time

CACHE = os.environ.get("NESTLAB_SVC_CACHE", "127.0.0.1:11211")
DB = os.environ.get("NESTLAB_SVC_DB", "127.0.0.1:3306")
DB_USER = os.environ.get("NESTLAB_SVC_DB_USER", "nestlab")
DB_PASSWORD = os.environ.get("NESTLAB_SVC_DB_PASSWORD", "")
HOPS = os.environ.get("NESTLAB_SVC_HOPS", "")
HOST = os.environ.get("NESTLAB_SVC_HOST", "app")
ROWS = int(os.environ.get("NESTLAB_SVC_ROWS", "1000"))
DB_WORK = int(os.environ.get("NESTLAB_SVC_DB_WORK", "0"))   # MD5s per miss query: the database's CPU
CONTROL = os.environ.get("NESTLAB_SVC_CONTROL", "")   # the delay fault's switch: <CONTROL>/delay-<host>
SESSIONS = 64          # session keys: always in the cache (a hit on every request)
TIMEOUT_S = 5.0



def statements(path: str = os.path.join(os.path.dirname(__file__), "mariadb.sql")) -> dict[str, str]:
    """The service's MariaDB statements by name (`-- name: X` sections of mariadb.sql)."""
    out: dict[str, list[str]] = {}
    name = None
    with open(path) as f:
        for line in f:
            if line.startswith("-- name:"):
                name = line.split(":", 1)[1].strip()
                out[name] = []
            elif name is not None and not line.startswith("--"):
                out[name].append(line)
    return {k: "".join(v).strip() for k, v in out.items()}


SQL = statements()
_local = threading.local()
_log_lock = threading.Lock()
_log = None
_log_pid = None


def _split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def _cache():
    c = getattr(_local, "cache", None)
    if c is None:
        from pymemcache.client.base import Client

        # default_noreply=False: every set waits for memcached's STORED, as an RPC does. pymemcache's
        # default sends sets without a reply: a call with no return, which Project5's nesting (call and
        # return pairs) cannot see, and which reconciliation merged with the next request's get.
        c = _local.cache = Client(_split(CACHE), connect_timeout=TIMEOUT_S, timeout=TIMEOUT_S, no_delay=True,
                                  default_noreply=False)
    return c


def _db():
    c = getattr(_local, "db", None)
    if c is None:
        import pymysql

        host, port = _split(DB)
        c = _local.db = pymysql.connect(host=host, port=port, user=DB_USER, password=DB_PASSWORD,
                                        database="nestlab", autocommit=True, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S, write_timeout=TIMEOUT_S)
    return c


def _drop(name: str) -> None:
    """Forget a connection that failed: the next call opens a new one."""
    c = getattr(_local, name, None)
    setattr(_local, name, None)
    try:
        if c is not None:
            c.close()
    except Exception:  # noqa: BLE001 - already broken
        pass


def _write_hops(lines: list[str]) -> None:
    global _log, _log_pid
    if not HOPS:
        return
    with _log_lock:
        if _log is None or _log_pid != os.getpid():   # a worker forked after a load: its own file
            _log_pid = os.getpid()
            _log = open(os.path.join(HOPS, f"hops-{HOST}-{_log_pid}.tsv"), "a", buffering=1)
        _log.write("".join(lines))


class Request:
    """One request's hops, written together when it ends."""

    def __init__(self, rid: str):
        self.rid, self.type, self.hops = rid, "", []

    def call(self, tier: str, fn, *args):
        start = time.monotonic()
        try:
            result = fn(*args)
        except Exception:
            self.hops.append((tier, start, time.monotonic(), "error"))
            _drop(tier)
            raise
        self.hops.append((tier, start, time.monotonic(), "ok"))
        return result


def _query(sql: str, args: tuple):
    with _db().cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def _read(req: Request, key: int) -> bytes:
    cache = _cache()
    req.call("cache", cache.get, f"session:{key % SESSIONS}")
    value = req.call("cache", cache.get, f"item:{key}")
    if value is not None:
        req.type = "hit"
        return value
    req.type = "miss"
    if DB_WORK:   # a query that costs the database CPU (a `slow` database shows), not only a lookup
        row = req.call("db", _query, SQL["read_item_work"], (DB_WORK, key % ROWS))
    else:
        row = req.call("db", _query, SQL["read_item"], (key % ROWS,))
    value = (row[0] if row else "").encode()
    req.call("cache", cache.set, f"item:{key}", value)
    return value


def _write(req: Request, key: int) -> bytes:
    req.type = "write"
    cache = _cache()
    req.call("cache", cache.get, f"session:{key % SESSIONS}")
    value = f"v{key}-{time.monotonic_ns()}"
    req.call("db", _query, SQL["write_item"], (value, key % ROWS))
    req.call("cache", cache.set, f"item:{key}", value.encode())
    return value.encode()


_delay = {"mtime": None, "seconds": 0.0}


def added_delay() -> float:
    """The delay fault in force at this host (harness/faults/delay.py): seconds, from its switch file
    (a stat per request; the file is read again only when it changes)."""
    if not CONTROL:
        return 0.0
    try:
        st = os.stat(os.path.join(CONTROL, f"delay-{HOST}"))
    except OSError:
        return 0.0
    if st.st_mtime_ns != _delay["mtime"]:
        try:
            with open(os.path.join(CONTROL, f"delay-{HOST}")) as f:
                _delay["seconds"] = max(0.0, float(f.read().strip() or 0))
        except (OSError, ValueError):
            return 0.0
        _delay["mtime"] = st.st_mtime_ns
    return _delay["seconds"]


def application(environ, start_response):
    path, method = environ.get("PATH_INFO", "/"), environ.get("REQUEST_METHOD", "GET")
    if path == "/health":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]
    parts = path.strip("/").split("/")
    if len(parts) != 2 or parts[0] != "item" or not parts[1].isdigit() or method not in ("GET", "POST"):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no such resource\n"]
    req = Request(environ.get("HTTP_X_REQUEST_ID", "-"))
    start = time.monotonic()
    status, body = "200 OK", b""
    try:
        body = (_write if method == "POST" else _read)(req, int(parts[1]))
    except Exception as e:  # noqa: BLE001 - a tier's failure is the answer's, and logged as such
        status, body = "502 Bad Gateway", f"{type(e).__name__}: {e}\n".encode()
    delay = added_delay()
    if delay > 0:   # the reply is held before it is sent (Project5's delay at one server)
        time.sleep(delay)
    end = time.monotonic()
    outcome = "ok" if status.startswith("200") else "error"
    pid = os.getpid()
    lines = [f"{req.rid}\t{req.type or 'error'}\tapp\t{HOST}\t{pid}\t{start:.6f}\t{end:.6f}\t{outcome}\n"]
    lines += [f"{req.rid}\t{req.type or 'error'}\t{tier}\t-\t-\t{s:.6f}\t{e:.6f}\t{o}\n" for tier, s, e, o in req.hops]
    _write_hops(lines)
    start_response(status, [("Content-Type", "application/octet-stream"), ("X-Request-Type", req.type or "error"),
                            ("Content-Length", str(len(body)))])
    return [body]
