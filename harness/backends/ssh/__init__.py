"""Testbed nodes over SSH (paramiko): the same Node interface as Mininet, on real machines.

On a testbed the network already exists (Emulab/CloudLab made the links, addresses and routes), so
this backend builds nothing: it connects to every node (host keys checked against known_hosts, never
added), verifies what the run relies on, records the real addresses, installs what is missing, sets
the congestion control, and measures every node's clock against the monitored host's. Everything it
changes on a node is written to the run's ledger (harness/ledger.py) first, so that teardown, and
`nestlab cleanup` after a killed run, can undo it. docs/ssh-backend.md describes the whole procedure.

    transport.py   how to reach a node (SshParams), pooled paramiko connections, host-key checks
    node.py        SshNode (the Node interface) and RemoteProc, the client of the command server
    nodeserver.py  the command server itself, run on each node (`python3 -u -c <source>`)
    provision.py   checking and installing the nodes, verifying the network, congestion control, clocks
    backend.py     SshBackend, the Backend the runner uses
    retrieve.py    bringing the collector's run.db and the logs back
    reported.py    checks on what a node reports (file names, interface names, addresses)
    cleanup.py     undoing a killed run on its nodes (`nestlab cleanup`)
"""

from harness.backends.ssh.backend import SshBackend
from harness.backends.ssh.transport import SshError, SshParams, ssh_params

__all__ = ["SshBackend", "SshError", "SshParams", "ssh_params"]
