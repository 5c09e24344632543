#!/usr/bin/env bash
# One-shot setup for a fresh Debian 12 machine: system packages, a virtualenv that sees Debian's
# Mininet, the Python package (editable) and the LD_PRELOAD interceptor. Idempotent; run as root.
# The system Python gets the modules a testbed node's tiers and drainer import (pymemcache, pymysql,
# numpy): the SSH backend's tests run those nodes in Mininet hosts of this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(mininet iperf lighttpd wget iptables iproute2 bridge-utils ethtool iputils-ping procps psmisc
      gcc make libc6-dev python3-venv python3-dev openssh-server openssh-client chromium tmux
      openjdk-17-jdk-headless
      nginx gunicorn memcached mariadb-server python3-pymemcache python3-pymysql python3-numpy)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Debian packages may start services we do not want running outside our namespaces (the service
# workload's tiers run only inside a run's Mininet hosts, docs/service.md).
for svc in lighttpd ssh nginx memcached mariadb; do systemctl disable --now "$svc" >/dev/null 2>&1 || true; done

# Debian's Mininet is installed for /usr/bin/python3 only: the venv must be built from it (see
# ../shared/notes/environment.md).
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[test]"
make -s -C harness/interceptor
make -s -C harness/streams/loopback   # keeps a streams run's Flink JVMs on loopback (harness/streams/cluster.py)
# Streams experiments (docs/streams.md): Apache Flink from PyFlink, in its own venv (its pins, such
# as pyarrow 16, would fight the project's), and our Flink job built against it.
if [ ! -x .venv-flink/bin/python ]; then
  /usr/bin/python3 -m venv .venv-flink
fi
if ! cmp -s harness/streams/requirements-flink.txt .venv-flink/installed.txt; then
  .venv-flink/bin/pip install -q --disable-pip-version-check -r harness/streams/requirements-flink.txt
  cp harness/streams/requirements-flink.txt .venv-flink/installed.txt
fi
./scripts/build-streams-job.sh
echo "setup: ok ($(.venv/bin/python -c 'import nestlab; print(nestlab.__version__)'))"
