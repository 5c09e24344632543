"""A server for the delay fault's deferral tests (tests/test_event_loop_delay.py), run under the
interceptor; the port goes to PORTFILE.

    reply_server.py PORTFILE [fork]

One connection at a time (with `fork`: each in a child made after accept); a request is a line
"N\\n": the reply is N bytes (byte i = i % 251) in sends of at most 64 KiB, then the server closes the
connection (or shuts down its write side first when the line is "N shut\\n"). "quit\\n" ends it.
"""

import os
import socket
import sys

CHUNK = 65536


def reply(c: socket.socket, n: int, shut: bool) -> None:
    data = bytes(i % 251 for i in range(251)) * (n // 251 + 1)
    sent = 0
    while sent < n:
        sent += c.send(data[sent:min(n, sent + CHUNK)])
    if shut:
        c.shutdown(socket.SHUT_WR)
    c.close()


def main() -> None:
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    forking = sys.argv[2:] == ["fork"]
    while True:
        c, _ = ls.accept()
        line = b""
        while not line.endswith(b"\n"):
            part = c.recv(100)
            if not part:
                break
            line += part
        words = line.split()
        if not words or words[0] == b"quit":
            c.close()
            return
        if forking:
            pid = os.fork()
            if pid == 0:
                ls.close()
                reply(c, int(words[0]), b"shut" in words)
                sys.exit(0)            # exit(), not _exit(): the library sends what it queued first
            c.close()
            os.waitpid(pid, 0)
        else:
            reply(c, int(words[0]), b"shut" in words)


if __name__ == "__main__":
    main()
