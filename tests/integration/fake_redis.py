"""A small fake Redis (RESP2) for tests that need a server to misbehave on purpose: a
Cluster node that redirects where no node is, a server whose replies are too big. It
answers each command with what `answer(args)` returns (raw RESP bytes, or an iterable
of byte chunks sent in turn), records every command, and collects any exception its
threads raise so that the test can fail on it (check())."""
import socket
import threading

from conftest import Reader


def bulk(s):
    b = s.encode() if isinstance(s, str) else s
    return b"$%d\r\n%s\r\n" % (len(b), b)


def array(*items):
    return b"*%d\r\n" % len(items) + b"".join(items)


def integer(n):
    return b":%d\r\n" % n


def slots_of(host, port, node_id="f" * 40):
    """CLUSTER SLOTS: one master at host:port serving every slot."""
    return array(array(integer(0), integer(16383), array(bulk(host), integer(port), bulk(node_id))))


class _Reader(Reader):
    """conftest's socket reader, reading RESP commands."""

    def command(self):
        head = self.line()
        if not head.startswith(b"*"):
            return head.decode(errors="replace").split()  # an inline command
        args = []
        for _ in range(int(head[1:])):
            size = self.line()
            assert size.startswith(b"$"), size
            args.append(self.exact(int(size[1:]) + 2)[:-2].decode(errors="replace"))  # (and its CRLF)
        return args


class FakeRedis:
    """Listens on host:port (a free port when 0); `answer(args)` decides each reply."""

    def __init__(self, answer, host="127.0.0.1", port=0):
        self.answer = answer
        self.commands = []  # every command received, in order, as lists of strings
        self.connections = 0
        self.errors = []
        self.sent_bytes = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.host, self.port = host, self._sock.getsockname()[1]
        self._stopped = False
        self._clients = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._clients.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        r = _Reader(c)
        try:
            while True:
                args = r.command()
                with self._lock:
                    self.commands.append(args)
                out = self.answer(args)
                chunks = [out] if isinstance(out, bytes) else out
                for chunk in chunks:
                    c.sendall(chunk)
                    with self._lock:
                        self.sent_bytes += len(chunk)
        except (EOFError, ConnectionError, OSError):
            pass  # the client went away (or was refused by us): the test reads what it saw
        except Exception as e:  # noqa: BLE001 - reported by check()
            with self._lock:
                self.errors.append(repr(e))
        finally:
            c.close()

    def names(self):
        """The command names received (upper case), in order."""
        with self._lock:
            return [a[0].upper() for a in self.commands if a]

    def check(self):
        assert not self.errors, self.errors

    def stop(self):
        self._stopped = True
        self._sock.close()
        with self._lock:
            for c in self._clients:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(5)
