"""The processes of tests/test_trace_messages.py, run under the interceptor with message tracing:
their socket calls are exactly those written here (send, recv and sendall of Python's socket module
are glibc's send and recv).

    trace_peer.py tcp-server PORTFILE    accept one connection: a peek, two requests (100, 50 bytes), two replies (300, 20)
    trace_peer.py tcp-client PORT        the other end
    trace_peer.py unix-pair              a socketpair and a fork: the parent sends 10 bytes, the child replies 7
    trace_peer.py echo-server PORTFILE   accept one connection; answer each request (until EOF) with 3 sends
    trace_peer.py flood N [PORT]         N one-byte sends on one end of a socketpair, nothing read
                                         (N small: the pair's buffer), or on a TCP connection to PORT
"""

import os
import socket
import sys


def recv_exactly(s: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        b = s.recv(n - got)
        if not b:
            raise SystemExit("early end of stream")
        got += len(b)


def main() -> None:
    mode = sys.argv[1]
    if mode == "tcp-server":
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(ls.getsockname()[1]))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        c, _ = ls.accept()
        assert c.recv(1, socket.MSG_PEEK) == b"q"    # a peek: counted, not traced (the bytes are read next)
        recv_exactly(c, 100)
        c.sendall(b"r" * 300)
        recv_exactly(c, 50)
        c.sendall(b"s" * 20)
        assert c.recv(10) == b""     # the client's close: a receive of 0 bytes
        c.close()
    elif mode == "tcp-client":
        s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
        s.sendall(b"q" * 100)
        recv_exactly(s, 300)
        s.sendall(b"p" * 50)
        recv_exactly(s, 20)
        s.close()
    elif mode == "unix-pair":
        a, b = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            a.close()
            recv_exactly(b, 10)
            b.sendall(b"y" * 7)
            os._exit(0)
        b.close()
        a.sendall(b"x" * 10)
        recv_exactly(a, 7)
        os.waitpid(pid, 0)
    elif mode == "echo-server":
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(ls.getsockname()[1]))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        c, _ = ls.accept()
        while c.recv(100):
            for part in (b"a", b"b", b"c"):    # one reply in three sends: held once, before the first
                c.send(part)
        c.close()
    elif mode == "flood":
        if len(sys.argv) > 3:
            a = socket.create_connection(("127.0.0.1", int(sys.argv[3])))
        else:
            a, b = socket.socketpair()
        for _ in range(int(sys.argv[2])):
            a.send(b"z")
        a.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
