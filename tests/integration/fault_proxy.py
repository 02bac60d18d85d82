#!/usr/bin/env python3
"""A TCP proxy that injects network faults in user space (this kernel has no netem),
between the gateway and a Redis node, switchable while a test runs.

    python3 fault_proxy.py TARGET_HOST:TARGET_PORT [LISTEN_PORT]
        prints "PORT <listen> <control>" once listening

Faults (each for the connections open when it is set, for new ones, or both):
  pass       bytes go through as they come
  latency    each chunk held `ms` (+ up to `jitter_ms` more, order kept), both ways
  slow       at most `bytes_per_s` each way
  stall      bytes held (read, not forwarded) until the fault is cleared, then sent:
             a pause, or with new connections too, a partition that heals
  blackhole  bytes read and dropped, both ways, for good: the flow is acknowledged and
             never answered (a middlebox that dropped it; it never heals)
  half_open  nothing read any more, nothing sent, sockets left open: the peer is gone
             without a FIN (windows fill, nothing is answered)
  reset      the connections are reset (RST) at once
  reset_reply the next chunk from the server is cut in half: its first half sent, then
             both sides reset (a reset in the middle of a reply); for new connections,
             each one's first reply

Control: a JSON object a line on the control port, answered with one line:
  {"op": "set", "fault": "blackhole", "existing": true, "new": false, ...parameters}
  {"op": "clear"}   new connections pass; stalled ones are released (blackholed and
                    half-open ones stay as they are: those flows are gone)
  {"op": "stats"}   {"accepted": n, "open": n, "conns": [{"id", "client_port", "fault",
                    "closed_by", "up", "down", "age_s"}]}  (closed_by: client, server,
                    proxy or null)
The class FaultProxy below starts one and drives it from a test.
"""
import asyncio
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

STICKY = {"blackhole", "half_open"}


class Conn:
    ids = 0

    def __init__(self, proxy, client_reader, client_writer, fault):
        Conn.ids += 1
        self.id = Conn.ids
        self.proxy, self.cr, self.cw = proxy, client_reader, client_writer
        self.sr = self.sw = None
        self.fault = fault
        self.changed = asyncio.Event()
        self.closed_by = None
        self.bytes = {"up": 0, "down": 0}
        self.opened = time.monotonic()
        self.done = False
        self.client_port = client_writer.get_extra_info("peername")[1]

    def set_fault(self, fault):
        if self.fault in STICKY and fault not in STICKY | {"reset"}:
            return
        self.fault = fault
        self.changed.set()
        self.changed = asyncio.Event()
        if fault == "reset":
            self.reset()

    def reset(self):
        for w in (self.cw, self.sw):
            if w is None:
                continue
            sock = w.get_extra_info("socket")
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            w.transport.abort()
        self.finish("proxy")

    def finish(self, by):
        if self.done:
            return
        self.done = True
        self.closed_by = by
        for w in (self.cw, self.sw):
            if w is not None:
                w.close()

    async def run(self, target):
        host, port = target
        try:
            self.sr, self.sw = await asyncio.open_connection(host, port)
        except OSError:
            self.finish("server")
            return
        self.sw.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cw.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(self.pump(self.cr, self.sw, "up", "client"), self.pump(self.sr, self.cw, "down", "server"),
                             return_exceptions=True)

    async def pump(self, reader, writer, way, side):
        """Reads from one side and sends to the other, as the fault says; in order."""
        queue = asyncio.Queue()
        sender = asyncio.ensure_future(self.send(queue, writer, way))
        last_release = 0.0
        try:
            while not self.done:
                if self.fault == "half_open":
                    await self.changed.wait()
                    continue
                read = asyncio.ensure_future(reader.read(65536))
                changed = asyncio.ensure_future(self.changed.wait())
                await asyncio.wait({read, changed}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    # The fault changed while waiting (half_open stops reading).
                    changed.cancel()
                    if self.fault == "half_open":
                        read.cancel()
                        continue
                    await read
                changed.cancel()
                data = read.result()
                if not data:
                    self.finish(side)
                    break
                self.bytes[way] += len(data)
                fault = self.fault
                if fault == "blackhole":
                    continue
                if fault == "reset_reply" and way == "down":
                    half = max(1, len(data) // 2)
                    writer.write(data[:half])
                    try:
                        await writer.drain()
                    except OSError:
                        pass
                    self.reset()
                    break
                release = time.monotonic()
                if fault == "latency":
                    release += (self.proxy.params.get("ms", 0) +
                                random.uniform(0, self.proxy.params.get("jitter_ms", 0))) / 1000
                # Order kept: never before the chunk ahead of it.
                last_release = max(last_release, release)
                await queue.put((data, last_release))
        except (ConnectionError, OSError, asyncio.CancelledError):
            self.finish(side)
        finally:
            await queue.put(None)
            try:
                await sender
            except Exception:  # noqa: BLE001 - the connection is going anyway
                pass

    async def send(self, queue, writer, way):
        while True:
            item = await queue.get()
            if item is None or self.done:
                return
            data, release = item
            # Held while stalled (released by a clear), dropped if the flow is gone since.
            while self.fault == "stall" and not self.done:
                await self.changed.wait()
            if self.fault in STICKY or self.done:
                continue
            delay = release - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            rate = self.proxy.params.get("bytes_per_s") if self.fault == "slow" else None
            try:
                if rate:
                    for i in range(0, len(data), 512):
                        writer.write(data[i:i + 512])
                        await writer.drain()
                        await asyncio.sleep(min(512, len(data) - i) / rate)
                else:
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                self.finish("proxy")
                return


class Proxy:
    def __init__(self, target):
        self.target = target
        self.conns = []
        self.new_fault = "pass"
        self.params = {}
        self.accepted = 0

    async def on_client(self, reader, writer):
        self.accepted += 1
        c = Conn(self, reader, writer, self.new_fault)
        self.conns.append(c)
        # (a bound: the test's connections are few; closed ones are dropped past it)
        if len(self.conns) > 4096:
            self.conns = [x for x in self.conns if not x.done][-4096:]
        await c.run(self.target)

    def control(self, msg):
        op = msg.get("op")
        if op == "set":
            fault = msg["fault"]
            self.params = {k: v for k, v in msg.items() if k not in ("op", "fault", "existing", "new")}
            if msg.get("existing", True):
                for c in self.conns:
                    if not c.done:
                        c.set_fault(fault)
            if msg.get("new", False):
                # (a reset of new connections is a refusal: "reset" applies to open ones only)
                self.new_fault = fault if fault != "reset" else "pass"
            return {"ok": True}
        if op == "clear":
            self.new_fault, self.params = "pass", {}
            for c in self.conns:
                if not c.done:
                    c.set_fault("pass")
            return {"ok": True}
        if op == "stats":
            now = time.monotonic()
            return {"accepted": self.accepted, "open": sum(not c.done for c in self.conns),
                    "conns": [{"id": c.id, "client_port": c.client_port, "fault": c.fault, "closed_by": c.closed_by,
                               "up": c.bytes["up"],
                               "down": c.bytes["down"], "age_s": round(now - c.opened, 3)} for c in self.conns]}
        return {"error": f"unknown op {op!r}"}

    async def on_control(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                writer.write((json.dumps(self.control(json.loads(line))) + "\n").encode())
                await writer.drain()
        finally:
            writer.close()


async def main():
    host, port = sys.argv[1].rsplit(":", 1)
    listen_port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    proxy = Proxy((host, int(port)))
    server = await asyncio.start_server(proxy.on_client, "127.0.0.1", listen_port)
    control = await asyncio.start_server(proxy.on_control, "127.0.0.1", 0)
    print(f"PORT {server.sockets[0].getsockname()[1]} {control.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.gather(server.serve_forever(), control.serve_forever())


class FaultProxy:
    """A fault_proxy.py process in front of `target` ("host:port"), for one test:
    set(fault, existing=True, new=False, **params), clear(), stats(), stop()."""

    def __init__(self, target, listen_port=0):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fault_proxy.py"), target, str(listen_port)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "PORT":
            self.proc.kill()
            raise RuntimeError(f"fault_proxy.py did not start (on port {listen_port}?): {line}")
        self.port, self.control_port = int(line[1]), int(line[2])
        self.address = f"127.0.0.1:{self.port}"
        self.sock = socket.create_connection(("127.0.0.1", self.control_port), timeout=10)
        self.file = self.sock.makefile("rwb")

    def _ask(self, msg):
        self.file.write((json.dumps(msg) + "\n").encode())
        self.file.flush()
        answer = json.loads(self.file.readline())
        assert "error" not in answer, answer
        return answer

    def set(self, fault, existing=True, new=False, **params):
        return self._ask({"op": "set", "fault": fault, "existing": existing, "new": new, **params})

    def clear(self):
        return self._ask({"op": "clear"})

    def stats(self):
        return self._ask({"op": "stats"})

    def open_conns(self):
        return [c for c in self.stats()["conns"] if c["closed_by"] is None]

    def stop(self):
        try:
            self.sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        os._exit(0)
