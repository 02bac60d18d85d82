"""A real gRPC server (Debian's python3-grpcio) for the gateway's gRPC tests, run as a
process of its own (so that a test can stop or kill it): generic handlers with bytes
messages, no generated code. Prints its port on its first line of output.

Usage: grpc_origin.py [--tls CERT KEY] [--name NAME] [--port P] [--max-streams N]

Methods of service test.Echo:
  Unary         the request back, with trailing metadata x-trailer: <name>
                (failing: UNAVAILABLE, trailers only)
  ServerStream  request "N" or "N:SIZE": N messages of SIZE bytes (default 16), the
                first bytes of each its number (failing: 2 messages, then UNAVAILABLE)
  ClientStream  every request joined
  Bidi          each request back as it comes
  Fail          INVALID_ARGUMENT "bad thing", trailing metadata x-trailer: failed
  Hang          until the call is cancelled (or 60 s)
  SetFailing    "unavailable" (Unary and ServerStream fail as said above) or anything
                else (they do not)
  SetHealth     "serving" or anything else: what grpc.health.v1.Health/Check answers
                (SERVING, else NOT_SERVING)
  Metadata      JSON: the call's metadata as the server got it, [[key, value], ...]
  Stats         JSON: {"cancelled": Hang calls cancelled, "calls": Hang calls begun,
                "streams": ServerStream calls begun, "unary": Unary calls, "sent":
                ServerStream messages handed to the transport, "name": NAME}
"""
import argparse
import json
import sys
import threading
import time
from concurrent import futures

import grpc

state = {"cancelled": 0, "calls": 0, "streams": 0, "unary": 0, "sent": 0, "serving": True, "checks": 0,
         "failing": False}
lock = threading.Lock()
NAME = "origin"


def unary(request, context):
    with lock:
        state["unary"] += 1
        failing = state["failing"]
    if failing:
        context.abort(grpc.StatusCode.UNAVAILABLE, "failing")
    context.set_trailing_metadata((("x-trailer", NAME),))
    return request


def server_stream(request, context):
    with lock:
        state["streams"] += 1
        failing = state["failing"]
    if failing:
        yield b"0"
        yield b"1"
        context.abort(grpc.StatusCode.UNAVAILABLE, "failing")
    text = request.decode() or "1"
    n, _, size = text.partition(":")
    size = int(size or 16)
    for i in range(int(n)):
        head = str(i).encode()
        with lock:
            state["sent"] += 1
        yield head + b"." * max(0, size - len(head))


def client_stream(requests, context):
    return b"".join(requests)


def bidi(requests, context):
    for r in requests:
        yield r


def fail(request, context):
    context.set_trailing_metadata((("x-trailer", "failed"),))
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad thing")


def hang(request, context):
    cancelled = threading.Event()
    with lock:
        state["calls"] += 1

    def on_end():
        if not cancelled.is_set():
            cancelled.set()
    context.add_callback(on_end)
    end = time.monotonic() + 60
    while context.is_active() and time.monotonic() < end:
        time.sleep(0.01)
    if not context.is_active():
        with lock:
            state["cancelled"] += 1
    return b""


def set_failing(request, context):
    with lock:
        state["failing"] = request == b"unavailable"
    return b""


def set_health(request, context):
    with lock:
        state["serving"] = request == b"serving"
    return b""


def health_check(request, context):
    """grpc.health.v1.Health/Check: HealthCheckResponse{status: SERVING (1) or NOT_SERVING (2)}."""
    with lock:
        state["checks"] += 1
        return b"\x08\x01" if state["serving"] else b"\x08\x02"


def metadata(request, context):
    return json.dumps([[k, v] for k, v in context.invocation_metadata()]).encode()


def stats(request, context):
    with lock:
        return json.dumps(dict(state, name=NAME)).encode()


def main():
    global NAME
    p = argparse.ArgumentParser()
    p.add_argument("--tls", nargs=2)
    p.add_argument("--name", default="origin")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--max-streams", type=int, default=0)  # SETTINGS_MAX_CONCURRENT_STREAMS (0: grpc's default)
    a = p.parse_args()
    NAME = a.name
    same = dict(request_deserializer=None, response_serializer=None)
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, **same),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, **same),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, **same),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, **same),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, **same),
        "Hang": grpc.unary_unary_rpc_method_handler(hang, **same),
        "Stats": grpc.unary_unary_rpc_method_handler(stats, **same),
        "Metadata": grpc.unary_unary_rpc_method_handler(metadata, **same),
    }
    options = [("grpc.so_reuseport", 0)]
    if a.max_streams:
        options.append(("grpc.max_concurrent_streams", a.max_streams))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), options=options)
    handlers["SetHealth"] = grpc.unary_unary_rpc_method_handler(set_health, **same)
    handlers["SetFailing"] = grpc.unary_unary_rpc_method_handler(set_failing, **same)
    health = {"Check": grpc.unary_unary_rpc_method_handler(health_check, **same)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),
                                     grpc.method_handlers_generic_handler("grpc.health.v1.Health", health)))
    address = f"127.0.0.1:{a.port}"
    if a.tls:
        cert, key = (open(f, "rb").read() for f in a.tls)
        port = server.add_secure_port(address, grpc.ssl_server_credentials(((key, cert),)))
    else:
        port = server.add_insecure_port(address)
    server.start()
    print(port, flush=True)
    # SIGTERM: a graceful stop (GOAWAY; calls in flight finish within 5 s).
    import signal
    signal.signal(signal.SIGTERM, lambda *_: server.stop(5))
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
