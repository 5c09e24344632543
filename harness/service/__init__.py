"""The multi-tier service workload (issue 33, docs/service.md): nginx balancing over two gunicorn
tiers running our WSGI application (app.py), which calls memcached and MariaDB; a load generator
(loadgen.py); the tiers' daemons (tiers.py); the true request paths from their logs (paths.py).

app.py runs under Debian's gunicorn on /usr/bin/python3: it and this file import only the standard
library (and pymemcache, pymysql), nothing else of the harness.
"""
