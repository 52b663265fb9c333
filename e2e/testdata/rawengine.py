#!/usr/bin/env python3
"""An OpenAI-compatible engine written with Python's standard library only,
on raw sockets, for the e2e suite: its framing and timing are not those of
tokentap's Go fake, so it finds what the fake hides. Usage:

    rawengine.py PORT

It prints "ready" on stdout once it listens on 127.0.0.1:PORT. How it
answers a request is chosen by the request's X-Shape header:

    close:SIZE:GAP_MS:SECONDS  a stream of events of SIZE content bytes every
                               GAP_MS for SECONDS, ended by closing the
                               connection (no length, no chunks, no [DONE])
    chunked:N                  N one-token events, chunked, usage and [DONE]
    cut:SENT:ANNOUNCED         a JSON answer announcing ANNOUNCED bytes,
                               sending SENT of them, then closing
    stream:FRAMING:SIZE:GAP_US:N  N events of SIZE content bytes, GAP_US
                               microseconds apart, framed by FRAMING: close
                               (ended by closing), chunked, or length (the
                               whole body announced by Content-Length);
                               usage and [DONE] at the end
    (none)                     chunked:5
GET /v1/models answers 401 (a key-protected engine), so the proxy labels
requests by the names clients send."""
import json
import socket
import sys
import threading
import time


def read_request(conn, buf):
    while b"\r\n\r\n" not in buf:
        data = conn.recv(1 << 16)
        if not data:
            return None, b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        data = conn.recv(1 << 20)
        if not data:
            return None, b""
        rest += data
    return (lines[0].split(" ")[1], headers), rest[length:]


def sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def token(rid, text):
    return {"id": rid, "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def serve(conn, seq):
    buf = b""
    try:
        while True:
            req, buf = read_request(conn, buf)
            if req is None:
                return
            path, headers = req
            if path.startswith("/v1/models"):
                body = b'{"error":{"message":"key required"}}'
                conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                continue
            rid = "chatcmpl-raw-%d" % next(seq)
            shape = headers.get("x-shape", "chunked:5").split(":")
            if shape[0] == "close":
                size, gap, seconds = int(shape[1]), float(shape[2]) / 1000, float(shape[3])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                event = sse(token(rid, "w" * size))
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    conn.sendall(event)
                    time.sleep(gap)
                return
            if shape[0] == "cut":
                sent, announced = int(shape[1]), int(shape[2])
                body = (b'{"id":"%s","object":"chat.completion","choices":[{"index":0,"message":{"content":"' % rid.encode()) + b"x" * announced
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % announced + body[:sent])
                return
            if shape[0] == "stream":
                framing, size, gap, n = shape[1], int(shape[2]), int(shape[3]) / 1e6, int(shape[4])
                events = [sse(token(rid, "w" * size))] * n
                usage = {"id": rid, "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                         "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}}
                tail = [sse(usage), b"data: [DONE]\n\n"]
                if framing == "length":
                    body = b"".join(events + tail)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body))
                    step = max(1, len(body) // max(1, n))
                    for i in range(0, len(body), step):
                        conn.sendall(body[i:i + step])
                        if gap:
                            time.sleep(gap)
                    continue
                if framing == "close":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                    for part in events + tail:
                        conn.sendall(part)
                        if gap:
                            time.sleep(gap)
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                for part in events + tail:
                    conn.sendall(chunk(part))
                    if gap:
                        time.sleep(gap)
                conn.sendall(b"0\r\n\r\n")
                continue
            n = int(shape[1]) if len(shape) > 1 else 5
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(n):
                conn.sendall(chunk(sse(token(rid, " t%d" % i))))
            usage = {"id": rid, "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}}
            conn.sendall(chunk(sse(usage)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    except OSError:
        pass
    finally:
        conn.close()


def counter():
    n = 0
    while True:
        n += 1
        yield n


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[1])))
    listener.listen(1024)
    print("ready", flush=True)
    seq = counter()
    lock = threading.Lock()

    def next_id():
        with lock:
            return next(seq)

    ids = iter(next_id, None)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, ids), daemon=True).start()


if __name__ == "__main__":
    main()
