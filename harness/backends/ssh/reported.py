"""Checks on what a testbed node reports, before it is used on the runner's side.

A node is not trusted to answer sensibly: a broken one (or a hostile one) could list a file named
`../../x`, report an interface named `eth0 -j ACCEPT` or an address with a newline in it. Whatever
a node reports reaches local paths, iptables input, `ip route` arguments and the web server's
configuration only through these checks. A refusal is one line (SshError) naming the node and the
value, the value shown with repr() so that it cannot break the line or the terminal.
"""

from __future__ import annotations

import ipaddress

from harness.backends.ssh.transport import SshError

IFNAMSIZ = 16     # the kernel's buffer for an interface name, its terminating NUL included


def refuse(where: str, what: str, value, why: str) -> SshError:
    return SshError(f"{where}: refusing {what} {value!r}: {why}")


def interface_name(where: str, value, what: str = "interface name") -> str:
    """An interface name as the kernel allows one (net/core/dev.c, dev_valid_name): 1 to 15 bytes,
    no '/', ':' or whitespace, neither '.' nor '..'."""
    ok = (isinstance(value, str) and 0 < len(value.encode("utf-8", "surrogateescape")) < IFNAMSIZ
          and value not in (".", "..") and not any(c in "/:\0" or c.isspace() or c == "\xa0" for c in value))
    if not ok:
        raise refuse(where, what, value, "not a Linux interface name (1-15 bytes, no '/', ':' or "
                                         "whitespace, not '.' or '..')")
    return value


def ipv4_address(where: str, value, what: str = "address") -> str:
    """A dotted-quad IPv4 address (the harness is IPv4 only), as ipaddress writes it."""
    if isinstance(value, str):
        try:
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            pass
    raise refuse(where, what, value, "not an IPv4 address")


def prefix_length(where: str, value, what: str = "prefix length") -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 32:
        return value
    raise refuse(where, what, value, "not an IPv4 prefix length (0-32)")


def file_name(value) -> str | None:
    """Why `value`, a name a node listed in a directory, cannot be a file name under a local directory
    (None: it can). Only a plain name is: no separator, not absolute, not '.' or '..', no NUL."""
    if not isinstance(value, str) or not value:
        return "not a file name"
    if value in (".", ".."):
        return "not a file name"
    if "/" in value or "\\" in value or "\0" in value:
        return "not a plain file name"
    return None


def route_word(where: str, value, what: str) -> str:
    """A keyword of a route as `ip -j route` prints one (protocol, scope, type): a name from
    iproute2's tables or a number, nothing else."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return str(value)
    if isinstance(value, str) and 0 < len(value) <= 32 and value.isascii() and \
            all(c.isalnum() or c in "_-" for c in value) and value[0] != "-":
        return value
    raise refuse(where, what, value, "not a route keyword (letters, digits, '_' and '-', or 0-255)")


def count(where: str, value, what: str, low: int, high: int) -> int:
    """A whole number in [low, high] (a next hop's weight)."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise refuse(where, what, value, f"not a whole number from {low} to {high}")


def sysctl_number(where: str, value, what: str) -> str:
    """A numeric sysctl's value as a node printed it (decimal, or 0x hex), as a decimal string."""
    if isinstance(value, str) and value.isascii():
        text = value.strip()
        try:
            number = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
        except ValueError:
            number = -1
        if 0 <= number < 1 << 32 and text and "_" not in text:
            return str(number)
    raise refuse(where, what, value, "not a sysctl number")
