"""The soak's hostile clients. Each loops until the run ends, counting what it did in Stats under
"h_<kind>"; an outcome the protocol rules out (docs/PROTOCOL.md, "Framing and limits") is counted
as "h_unexpected" with a message, and fails the soak like a wrong honest answer.

  reader     pipelines SpMV requests whose answers are 2,000 times their size (a tall matrix,
             x of one value) and never reads; after hold_s it resets the connection
  slowloris  a request's first byte (an array header), then one byte a second: the daemon must
             close it once --message-timeout-ms passes
  bomb       declared lengths that cannot fit (bin32, str32, array32, map32 of 2^32 - 1), more
             array elements than the limit, nesting past the limit, bytes that are not msgpack
  abort      part of a request then a close or an RST (mid-frame), or whole requests (a solve,
             a burst of SpMVs) then a close before the answers (mid-request)
  ghost      connects and leaves without a word
"""

import select
import socket
import struct
import time

import msgpack

import wire

PROBE = ("auth", {"name": "soak", "token": "soak"})  # cheap, answered without an auth file


def _read_until(sock, seconds, want):
    """Messages the daemon sent within `seconds` (or until `want` came), and whether it closed
    the connection."""
    unpacker = msgpack.Unpacker(raw=False)
    msgs, deadline = [], time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return msgs, False
        sock.settimeout(left)
        try:
            data = sock.recv(1 << 16)
        except socket.timeout:
            return msgs, False
        except OSError:
            return msgs, True
        if not data:
            return msgs, True
        unpacker.feed(data)
        msgs.extend(unpacker)
        if want and len(msgs) >= want:
            return msgs, False


def _closed(sock):
    """Whether the daemon has closed this connection (a non-blocking look, reading nothing)."""
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def reader(port, tall_id, stats, stop, hold_s, rate):
    x = wire.f64([1.0])
    while not stop.is_set():
        try:
            s = wire.connect(port)
        except OSError as e:
            stats.fail("h_unexpected", f"reader: cannot connect: {e}")
            stop.wait(1.0)
            continue
        s.setblocking(False)
        msgid, pending, start, cut = 0, b"", time.monotonic(), False
        while time.monotonic() - start < hold_s and not stop.is_set():
            budget = max(1, int(rate * 0.05))
            try:
                while budget > 0:
                    if not pending:
                        msgid += 1
                        pending = wire.request(msgid, "spmv", {"id": tall_id, "x": x})
                        budget -= 1
                    pending = pending[s.send(pending):]
            except BlockingIOError:
                pass  # the daemon stopped reading us: the point
            except OSError:
                cut = True  # the daemon closed us (a client-memory cap evicting the largest)
                break
            stop.wait(0.05)
        stats.add("h_reader")
        stats.add("h_reader_requests", msgid)
        if cut:
            stats.add("h_reader_cut")
        wire.reset(s)


def slowloris(port, stats, stop, timeout_s):
    body = wire.request(1, "spmv", {"id": "0" * 32, "x": b"\0" * 4096})
    while not stop.is_set():
        try:
            s = wire.connect(port)
        except OSError as e:
            stats.fail("h_unexpected", f"slowloris: cannot connect: {e}")
            stop.wait(1.0)
            continue
        start, i, closed = time.monotonic(), 0, False
        while not stop.is_set() and i < len(body):
            try:
                s.send(body[i:i + 1])
            except OSError:
                closed = True
                break
            i += 1
            if stop.wait(1.0):
                break
            if _closed(s):
                closed = True
                break
            if time.monotonic() - start > timeout_s + 10:
                stats.fail("h_unexpected", f"slowloris: still open {timeout_s + 10:.0f} s after "
                           f"its first byte (message timeout {timeout_s:.0f} s)")
                break
        if closed:
            stats.add("h_slowloris")
        s.close()


def _bombs():
    """(name, bytes, what must follow): 'too_large' (TOO_LARGE naming msgid 7), 'too_large_then_ok'
    (and the connection carries on: a probe is answered), 'closed' (the daemon closes it)."""
    sid = "0123456789abcdef0123456789abcdef"
    head = b"\x94\x00\x07\xa4spmv"  # [0, 7, "spmv", ...
    idx = msgpack.packb({"id": sid, "x": None})[:-1]  # the map, less its last value
    many = 1048576 + 128
    return [
        ("bin32", head + b"\x91" + idx + b"\xc6\xff\xff\xff\xff", "too_large"),
        ("str32", b"\x94\x00\x07\xdb\xff\xff\xff\xff", "too_large"),
        ("array32", head + b"\xdd\xff\xff\xff\xff", "too_large"),
        ("map32", head + b"\x91\xdf\xff\xff\xff\xff", "too_large"),
        ("elements", head + b"\x91" + idx + b"\xdd" + struct.pack(">I", many) + b"\xc0" * many,
         "too_large_then_ok"),
        ("nesting", head + b"\x91" * 64 + b"\xc0", "closed"),
        ("not_msgpack", b"\x94\x00\x07\xc1\xc1\xc1", "closed"),
    ]


def bomb(port, stats, stop):
    bombs = _bombs()
    n = 0
    while not stop.is_set():
        name, data, expect = bombs[n % len(bombs)]
        n += 1
        try:
            s = wire.connect(port)
            s.sendall(data)
            if expect == "too_large_then_ok":
                s.sendall(wire.request(8, *PROBE))
            want = {"closed": 0, "too_large": 1, "too_large_then_ok": 2}[expect]
            msgs, closed = _read_until(s, 10.0, want)
        except OSError as e:
            stats.fail("h_unexpected", f"bomb {name}: {e}")
            continue
        answers = [m for m in msgs if isinstance(m, list) and len(m) == 4 and m[0] == 1]
        if expect == "closed":
            fine = closed
        else:
            fine = bool(answers) and answers[0][1] == 7 and \
                (answers[0][2] or {}).get("code") == "TOO_LARGE"
            if expect == "too_large_then_ok":
                fine = fine and len(answers) > 1 and answers[1][1] == 8 and answers[1][2] is None
        if fine:
            stats.add("h_bomb")
        else:
            stats.fail("h_unexpected", f"bomb {name}: expected {expect}, got {answers!r:.300} "
                       f"({'closed' if closed else 'open'})")
        if n % 2:
            wire.reset(s)
        else:
            s.close()
        stop.wait(0.2)


def abort(port, spmv_id, spmv_cols, solve_id, solve_rows, stats, stop, rng):
    while not stop.is_set():
        how = rng.choice(["mid_frame", "mid_solve", "mid_burst"])
        try:
            s = wire.connect(port)
            if how == "mid_frame":
                req = wire.request(1, "spmv", {"id": spmv_id,
                                               "x": wire.f64(rng.standard_normal(spmv_cols))})
                s.sendall(req[:int(rng.integers(1, len(req)))])
            elif how == "mid_solve":
                s.sendall(wire.request(1, "solve", {"id": solve_id, "method": "pcg",
                                                    "b": wire.f64(rng.standard_normal(solve_rows))}))
            else:
                x = wire.f64(rng.standard_normal(spmv_cols))
                s.sendall(b"".join(wire.request(i, "spmv", {"id": spmv_id, "x": x})
                                   for i in range(1, 9)))
        except OSError as e:
            stats.fail("h_unexpected", f"abort {how}: {e}")
            continue
        if rng.random() < 0.5:
            wire.reset(s)
        else:
            s.close()
        stats.add("h_abort")
        stop.wait(0.2)


def ghost(port, stats, stop):
    while not stop.is_set():
        try:
            wire.connect(port).close()
            stats.add("h_ghost")
        except OSError as e:
            stats.fail("h_unexpected", f"ghost: {e}")
        stop.wait(0.1)
