"""A small DNS server over UDP for the tests of upstream servers given by name: it
answers A and AAAA questions from a table the test sets (set()), or SERVFAIL for every
question while failing is on, and counts the questions it gets. It runs on a helper
thread of the test (conftest.Thread: a malformed packet fails the test at close())."""
import socket
import struct
import threading

from conftest import Thread

A, AAAA = 1, 28


class DNSServer:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._names = {}  # lower-case name -> [IPv4 text]
        self.failing = False
        self.questions = {}  # name -> questions received
        self._stop = False
        self._thread = Thread(target=self._serve, name="dns")
        self._thread.start()

    def set(self, name, addresses):
        with self._lock:
            self._names[name.lower()] = list(addresses)

    def fail(self, on):
        with self._lock:
            self.failing = on

    def asked(self, name):
        with self._lock:
            return self.questions.get(name.lower(), 0)

    def close(self):
        self._stop = True
        self._thread.join(5)
        self.sock.close()

    def _serve(self):
        while not self._stop:
            try:
                packet, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            self.sock.sendto(self._answer(packet), peer)

    def _answer(self, packet):
        qid, flags, qd = struct.unpack("!HHH", packet[:6])
        assert qd == 1, f"{qd} questions in one query"
        labels, at = [], 12
        while packet[at]:
            n = packet[at]
            labels.append(packet[at + 1:at + 1 + n].decode())
            at += 1 + n
        qtype, qclass = struct.unpack("!HH", packet[at + 1:at + 5])
        question = packet[12:at + 5]
        name = ".".join(labels).lower()
        with self._lock:
            self.questions[name] = self.questions.get(name, 0) + 1
            failing, addresses = self.failing, self._names.get(name)
        rd = flags & 0x0100
        if failing:
            return struct.pack("!HHHHHH", qid, 0x8080 | rd | 2, 1, 0, 0, 0) + question  # SERVFAIL
        if addresses is None:
            return struct.pack("!HHHHHH", qid, 0x8480 | rd | 3, 1, 0, 0, 0) + question  # NXDOMAIN
        answers = b""
        count = 0
        if qtype == A and qclass == 1:
            for a in addresses:
                answers += struct.pack("!HHHIH", 0xC00C, A, 1, 1, 4) + socket.inet_aton(a)
                count += 1
        return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, count, 0, 0) + question + answers
