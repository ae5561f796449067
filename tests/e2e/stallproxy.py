# SPDX-License-Identifier: Apache-2.0
"""A TCP proxy the cluster tests own (issue 38), in front of PostgreSQL's Unix socket: a replica
whose ledger URL names 127.0.0.1:PORT reaches the server through it, and the test can

- black_hole(): stop answering, as a proxy in front of a lost database does. Every connection,
  and every new one, is kept open and accepted, and what either side sends is read and thrown
  away (the kernel still acknowledges it: nothing times out at the TCP level, as with a real
  hang). stalled() is set as soon as a request of the client has no answer coming: one sent
  into the hole, or one forwarded before the cut whose answer was not passed on yet;
- unanswered(conns): whether one of these connections has a request forwarded to the server and
  nothing of its answer seen (used once the server's backend is SIGSTOPped: a request that is
  then unanswered stays so: the call is in flight to a hung backend);
- freeze_on(pattern, pid): SIGSTOP a process (the replica) the moment its client sends a message
  whose bytes match pattern, and only then forward that message: the replica is frozen with that
  statement sent, whatever it holds on the server (a claim's lock, an open transaction).

One thread of the test process runs it (select over non-blocking sockets). Every decision about
a connection's state is taken under one lock, together with the reads that change it."""
import array
import fcntl
import os
import re
import select
import signal
import socket
import termios
import threading
import time


def pending_bytes(sock):
    """Bytes readable on a socket now (FIONREAD), 0 once it is closed."""
    if sock is None or sock.fileno() < 0:
        return 0
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    except OSError:
        return 0
    return buf[0]


def is_stopped(pid):
    """Whether every thread of pid is in the stopped state (T); False once it is gone."""
    try:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return False
    return bool(states) and all(s in ("T", "t") for s in states)


def wait_stopped(pid, timeout=5.0):
    """Waits until every thread of pid is stopped after a SIGSTOP, which takes effect
    asynchronously. No event tells a non-parent that a process stopped: /proc is read until it
    says so (bounded; microseconds in practice)."""
    deadline = time.monotonic() + timeout
    while not is_stopped(pid):
        if not os.path.exists(f"/proc/{pid}"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not stop within {timeout}s")
        time.sleep(0.0005)


class _Conn:
    def __init__(self, client, server):
        self.client = client
        self.server = server  # None: accepted into the black hole
        self.to_server = bytearray()
        self.to_client = bytearray()
        self.last = None  # "c2s" or "s2c": the direction of the last bytes passed on
        self.tail = b""  # the end of what the client sent before, for matches across reads

    def sockets(self):
        return [s for s in (self.client, self.server) if s is not None]


class StallProxy:
    def __init__(self, unix_path):
        self.unix_path = unix_path
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []
        self.holed = False
        self.stalled = threading.Event()
        self.frozen = threading.Event()
        self.frozen_by = None  # the bytes that matched freeze_on's pattern
        self._freeze = None  # (compiled pattern, pid)
        self._closing = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.error = None
        self.thread = threading.Thread(target=self._loop, name="stallproxy", daemon=True)
        self.thread.start()

    # --- what the test calls ---

    def url(self, db, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://lastcall@127.0.0.1:{self.port}/{db}" + (f"?{query}" if query else "")

    def connections(self):
        with self.lock:
            return list(self.conns)

    def black_hole(self):
        with self.lock:
            self.holed = True
            for c in self.conns:
                if c.last == "c2s" or c.to_server or pending_bytes(c.client):
                    self.stalled.set()
                c.to_server.clear()
                c.to_client.clear()
        self._wake()

    def unanswered(self, conns):
        """Whether one of conns (still open) has forwarded a request of its client to the server
        and seen nothing of the answer (none read by the proxy, none waiting in its socket)."""
        with self.lock:
            return any(c in self.conns and c.server is not None and c.last == "c2s"
                       and pending_bytes(c.server) == 0 and not c.to_client for c in conns)

    def freeze_on(self, pattern, pid):
        with self.lock:
            self._freeze = (re.compile(pattern, re.IGNORECASE | re.DOTALL), pid)

    def close(self):
        self._closing = True
        self._wake()
        self.thread.join(timeout=10)
        with self.lock:
            for c in self.conns:
                for s in c.sockets():
                    s.close()
            self.conns = []
        self.listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # --- the thread ---

    def _wake(self):
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _loop(self):
        try:
            while not self._closing:
                with self.lock:
                    readers = [self.listener, self._wake_r]
                    writers = []
                    for c in self.conns:
                        readers += c.sockets()
                        if c.to_server and c.server is not None:
                            writers.append(c.server)
                        if c.to_client:
                            writers.append(c.client)
                r, w, _ = select.select(readers, writers, [])
                with self.lock:
                    if self._wake_r in r:
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
                    if self.listener in r:
                        self._accept()
                    for c in list(self.conns):
                        if c.client in r:
                            self._from_client(c)
                        if c in self.conns and c.server is not None and c.server in r:
                            self._from_server(c)
                        if c in self.conns:
                            self._flush(c)
        except Exception as e:  # surfaced by the tests through .error
            self.error = e
            raise

    def _accept(self):
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        client.setblocking(False)
        server = None
        if not self.holed:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.unix_path)
            server.setblocking(False)
        self.conns.append(_Conn(client, server))

    def _drop(self, c):
        for s in c.sockets():
            s.close()
        self.conns.remove(c)

    def _from_client(self, c):
        try:
            data = c.client.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or abandoned) the connection
            self._drop(c)
            return
        if self.holed:
            self.stalled.set()  # a request into the hole: it gets no answer
            return
        if self._freeze:
            pattern, pid = self._freeze
            seen = c.tail + data
            m = pattern.search(seen)
            if m:
                self._freeze = None
                os.kill(pid, signal.SIGSTOP)
                wait_stopped(pid)
                self.frozen_by = m.group(0).decode(errors="replace")
                self.frozen.set()
            c.tail = seen[-256:]
        c.to_server += data
        c.last = "c2s"

    def _from_server(self, c):
        try:
            data = c.server.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if self.holed:  # the black hole keeps its side open, whatever the server does
                c.server.close()
                c.server = None
            else:
                self._drop(c)
            return
        if self.holed:
            return
        c.to_client += data
        c.last = "s2c"

    def _flush(self, c):
        for sock, buf in ((c.server, c.to_server), (c.client, c.to_client)):
            if sock is None or not buf or self.holed:
                continue
            try:
                n = sock.send(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                self._drop(c)
                return
            del buf[:n]
