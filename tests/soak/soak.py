#!/usr/bin/env python3
"""krylovd soak: honest clients beside hostile ones against one daemon for SOAK_MINUTES.

It fails (exit 1) when an honest answer is wrong or lost, a hostile client meets an outcome the
protocol rules out, the daemon dies or exits uncleanly, or its resident memory (VmRSS, beyond 16
MiB), the bytes malloc holds in use less the clients' (server.status host_memory and
client_memory: kept_bytes), open
descriptors (/proc/PID/fd) or device bytes (server.status device_bytes_used) grow by more than
--tolerance (5%) after the warm-up:

  preparation  (not timed) the daemon starts, the long-lived matrices are put and one request of
               each kind is served, so every OpenCL program the run uses is built
  warm-up      the first --warmup (20%) of the run: buffers, allocator arenas and caches settle;
               not judged
  reference    the next --warmup of the run: the median of its samples is the baseline
  last window  the final --warmup of the run: its median may exceed the baseline by --tolerance

Medians of windows, not single samples, because connections come and go every fraction of a
second and one sample can catch a burst. Writes OUT/soak.csv (one row per sample), OUT/summary.txt
(also printed), OUT/soak.svg (plot_soak.py) and OUT/krylovd.log.

  /usr/bin/python3 tests/soak/soak.py --bin-dir build/bin --minutes 10 --out soak-out
"""

import argparse
import csv
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import numpy as np
import scipy.io
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python", "lib"))

import honest  # noqa: E402
import hostile  # noqa: E402
import kd_daemon  # noqa: E402
import plot_soak  # noqa: E402
import wire  # noqa: E402

CODES = ("BAD_REQUEST", "NOT_FOUND", "TOO_LARGE", "DEVICE_MEMORY", "DEVICE_ERROR", "BUSY",
         "CANCELLED", "TIMEOUT", "UNSUPPORTED", "NOT_SPD", "UNAUTHENTICATED", "FORBIDDEN",
         "QUOTA", "STORAGE_FULL", "INTERNAL", "other")  # other: any code not named here
METHODS = ("matrix.put", "spmv", "solve", "matrix.drop", "matrix.info", "auth", "server.status")
HOSTILE = ("h_reader", "h_reader_requests", "h_reader_cut", "h_slowloris", "h_bomb", "h_abort",
           "h_ghost", "h_unexpected")
WATCHED = ("rss_bytes", "kept_bytes", "fds", "device_bytes")
# Growth within this many units passes whatever the percentage: about 20 descriptors are open, and
# whether a sample catches a connection between accept and close moves the median by one or two;
# a descriptor leak over thousands of connections is far past it.
# RSS also holds what glibc's arenas keep of freed memory: one arena per thread that allocated,
# each reaching its high-water mark when a burst happens to land on it, so in a one-minute run the
# median moves by up to a few percent with no leak (CI saw 127.1 -> 133.6 MiB, +5.1%, with malloc's
# in-use bytes flat). A leak shows in kept_bytes, and over a long soak in RSS too: what malloc
# holds in use (mallinfo2, without that retention) less what the clients hold by client memory's
# count (buffers, requests in flight, unread answers: the never-reader alone swings it by up to
# --max-pending-write) and the recycle shelf's idle buffers, so what krylovd keeps for itself. Its
# slack is the uncounted work of a few requests in flight (a solve's host vectors on PoCL); it
# flattens within about 20 s of load (3-minute run: 68.9 -> 69.0 MiB).
SLACK = {"fds": 2, "rss_bytes": 16 << 20, "kept_bytes": 4 << 20}


def parse_args():
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=env("KD_BIN_DIR", os.path.join(HERE, "..", "..", "build", "bin")))
    ap.add_argument("--minutes", type=float, default=float(env("SOAK_MINUTES", "10")))
    ap.add_argument("--out", default=env("SOAK_OUT", "soak-out"))
    ap.add_argument("--honest", type=int, default=3, help="honest client threads")
    ap.add_argument("--readers", type=int, default=2, help="never-reading connections at a time")
    ap.add_argument("--reader-hold-s", type=float, default=15.0, help="a reader's connection life")
    ap.add_argument("--reader-rate", type=float, default=200.0, help="a reader's requests a second")
    ap.add_argument("--slowloris", type=int, default=3)
    ap.add_argument("--message-timeout-ms", type=int, default=10000)
    ap.add_argument("--client-memory", default="256M",
                    help="passed as --client-memory when the daemon has that option")
    ap.add_argument("--daemon-args", default="",
                    help="more krylovd options, e.g. \"--max-pending-write 8M\" (shell words)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=0.2, help="fraction of the run per window")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--no-trim", action="store_true",
                    help="at the end, do not call malloc_trim(0) in the daemon through gdb (done "
                         "when gdb is installed) to report the RSS that remains: live memory, "
                         "not the allocator's high-water mark")
    ap.add_argument("--no-drop", action="store_true",
                    help="honest clients keep what they put, so device bytes grow: the verdict "
                         "must fail (a check of the check)")
    ap.add_argument("--seed", type=int, default=int(env("KD_TEST_SEED", "0"), 0) or None)
    return ap.parse_args()


# -- the daemon's footprint -----------------------------------------------------------------------

def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def flatten(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[path] = v
    return out


# -- preparation ----------------------------------------------------------------------------------

def put_csr(conn, a, name):
    err, res = conn.call("matrix.put", {
        "rows": a.shape[0], "cols": a.shape[1], "indptr": wire.i32(a.indptr),
        "indices": wire.i32(a.indices), "values": wire.f64(a.data), "name": name,
        "select": "heuristic"}, timeout=600)
    if err is not None:
        raise RuntimeError(f"put {name}: {err}")
    return res["id"]


def load_mtx(name):
    a = scipy.io.mmread(kd_daemon.matrix_path(name)).tocsr().astype(np.float64)
    a.sum_duplicates()
    a.sort_indices()
    return a


def prepare(port, rng):
    """Puts the long-lived matrices and serves one request of each kind (programs get built)."""
    shared = honest.Shared()
    conn = wire.Conn(port)
    for name in ("bayer10.mtx", "arrow.mtx", "Groebner_id2003_aug.mtx"):
        a = load_mtx(name)
        shared.spmv_set.append((a, put_csr(conn, a, name)))
    shared.lap = honest.laplacian(60, 0.1)
    shared.lap_id = put_csr(conn, shared.lap, "laplacian-60")
    shared.lap_lu = honest.lu(shared.lap)
    shared.bus = load_mtx("494_bus.mtx")
    shared.bus_id = put_csr(conn, shared.bus, "494_bus")
    # the readers' matrix: a 100,000 x 1 column, so 8 bytes of x bring 800 kB of y
    tall = sp.csr_matrix(rng.standard_normal((100000, 1)))
    shared.tall_id = put_csr(conn, tall, "tall")
    conn.close()
    stats = honest.Stats()
    warm = honest.Honest(port, shared, stats, rng, threading.Event())
    for a, mid in shared.spmv_set:
        warm.spmv(a, mid, "float64")
    for _ in range(8):
        warm.solve()
    for i in range(8):
        warm.put_use_drop("float32" if i % 2 else "float64")
    warm.conn.close()  # a wrong answer raised honest.Wrong: the soak stops before it starts
    return shared


# -- the run --------------------------------------------------------------------------------------

def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    kd_daemon.BIN_DIR = os.path.abspath(args.bin_dir)
    krylovd = os.path.join(kd_daemon.BIN_DIR, "krylovd")
    help_text = subprocess.run([krylovd, "--help"], capture_output=True, text=True).stdout
    extra = ["--message-timeout-ms", str(args.message_timeout_ms),
             "--log-file", os.path.abspath(os.path.join(args.out, "krylovd.log"))]
    client_memory = "--client-memory" in help_text
    if client_memory:
        extra += ["--client-memory", args.client_memory]
    extra += shlex.split(args.daemon_args)
    seed = args.seed if args.seed is not None else time.time_ns() % (1 << 63)
    print(f"KD_TEST_SEED={seed}", flush=True)
    rng = np.random.default_rng(seed)

    daemon = kd_daemon.Daemon(*extra).start()
    t_prep = time.monotonic()
    try:
        shared = prepare(daemon.port, rng)
        prep_s = time.monotonic() - t_prep
        rows, stats, verdict_lines, ok = run(args, daemon, shared, rng)
    finally:
        status = daemon.stop()
    duration = args.minutes * 60
    header = [
        f"krylovd soak: {args.minutes:g} min, {args.honest} honest clients, {args.readers} "
        f"never-reading, {args.slowloris} slow senders, 1 bomb, 1 abort, 1 ghost client; "
        f"seed {seed}",
        f"daemon: --message-timeout-ms {args.message_timeout_ms}"
        + (f" --client-memory {args.client_memory}" if client_memory else "")
        + (f" {args.daemon_args}" if args.daemon_args else "")
        + ("" if client_memory else " (no --client-memory option in this build)"),
        f"preparation (not timed): {prep_s:.1f} s; warm-up: the first {args.warmup * duration:.0f} s;"
        f" reference window: the next {args.warmup * duration:.0f} s; last window: the final "
        f"{args.warmup * duration:.0f} s",
    ]
    if status != 0:
        ok = False
        verdict_lines.append(f"FAIL: krylovd exited with status {status}")
    else:
        verdict_lines.append("krylovd exited cleanly on SIGTERM (status 0)")
    text = "\n".join(header + verdict_lines + ["PASS" if ok else "FAIL"]) + "\n"
    print(text, end="")
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text)
    plot_soak.plot(os.path.join(args.out, "soak.csv"), os.path.join(args.out, "soak.svg"),
                   title=f"krylovd soak, {args.minutes:g} min", warmup=args.warmup)
    return 0 if ok else 1


def start_threads(args, port, shared, stats, stop, rng):
    threads = []

    def spawn(fn, *a):
        t = threading.Thread(target=fn, args=a, daemon=True)
        t.start()
        threads.append(t)

    for i in range(args.honest):
        spawn(honest.Honest(port, shared, stats, np.random.default_rng(rng.integers(1 << 62)),
                            stop, keep=args.no_drop).run)
    for _ in range(args.readers):
        spawn(hostile.reader, port, shared.tall_id, stats, stop, args.reader_hold_s,
              args.reader_rate)
    for _ in range(args.slowloris):
        spawn(hostile.slowloris, port, stats, stop, args.message_timeout_ms / 1000)
    a, mid = shared.spmv_set[0]
    spawn(hostile.bomb, port, stats, stop)
    spawn(hostile.abort, port, mid, a.shape[1], shared.bus_id, shared.bus.shape[0], stats, stop,
          np.random.default_rng(rng.integers(1 << 62)))
    spawn(hostile.ghost, port, stats, stop)
    return threads


def run(args, daemon, shared, rng):
    pid = daemon.proc.pid
    stats = honest.Stats()
    stop = threading.Event()
    probe = wire.Conn(daemon.port)
    err, first = probe.call("server.status", {}, timeout=60)
    evict_keys = sorted(k for k in flatten(first) if "evict" in k)
    columns = (["t_s", "rss_bytes", "malloc_in_use_bytes", "kept_bytes", "fds", "device_bytes", "connections", "status_ms"]
               + [f"ok_{k}" for k in honest.KINDS] + ["busy", "wrong", "lost"] + list(HOSTILE)
               + [f"req_{m}" for m in METHODS] + ["requests"] + [f"err_{c}" for c in CODES]
               + [f"evict:{k}" for k in evict_keys]
               + ["closed_slow", "paused", "accepted"])
    out = open(os.path.join(args.out, "soak.csv"), "w", newline="")
    writer = csv.writer(out)
    writer.writerow(columns)
    rows = []
    resting = rss_bytes(pid)  # prepared, before the load
    threads = start_threads(args, daemon.port, shared, stats, stop, rng)
    start = time.monotonic()
    duration = args.minutes * 60
    failures = []
    next_t = start
    while True:
        now = time.monotonic()
        if daemon.proc.poll() is not None:
            failures.append(f"FAIL: krylovd died at t = {now - start:.0f} s "
                            f"(status {daemon.proc.returncode})")
            break
        t0 = time.monotonic()
        try:
            err, st = probe.call("server.status", {}, timeout=60)
        except (wire.Closed, wire.Timeout) as e:
            failures.append(f"FAIL: server.status at t = {now - start:.0f} s: {e}")
            break
        status_ms = (time.monotonic() - t0) * 1000
        flat = flatten(st)
        c = stats.snapshot()
        host = st.get("host_memory", {})
        in_use = host.get("malloc_in_use_bytes", 0)
        climem = st.get("client_memory", {})
        clients = (climem.get("used_bytes", 0) + climem.get("closing_bytes", 0)
                   + host.get("recycle_idle_bytes", 0))
        try:
            rss, fds = rss_bytes(pid), fd_count(pid)
        except OSError as e:  # it died between the status and now
            failures.append(f"FAIL: krylovd's /proc at t = {now - start:.0f} s: {e}")
            break
        row = {"t_s": round(now - start, 2), "rss_bytes": rss,
               "malloc_in_use_bytes": in_use, "kept_bytes": in_use - clients,
               "fds": fds,
               "device_bytes": st.get("device_bytes_used", 0),
               "connections": st.get("connections", 0), "status_ms": round(status_ms, 2)}
        row.update({f"ok_{k}": c.get(k, 0) for k in honest.KINDS})
        row.update({k: c.get(k, 0) for k in ("busy", "wrong", "lost") + HOSTILE})
        row.update({f"req_{m}": st.get("requests_by_method", {}).get(m, 0) for m in METHODS})
        row["requests"] = st.get("requests", 0)
        by_code = st.get("errors_by_code", {})
        row.update({f"err_{k}": by_code.get(k, 0) for k in CODES})
        row["err_other"] = sum(v for k, v in by_code.items() if k not in CODES)
        row.update({f"evict:{k}": flat.get(k, 0) for k in evict_keys})
        cs = st.get("connection_stats", {})
        row.update({"closed_slow": cs.get("closed_slow", 0), "paused": cs.get("paused", 0),
                    "accepted": cs.get("accepted", 0)})
        writer.writerow([row[k] for k in columns])
        out.flush()
        rows.append(row)
        if now - start >= duration:
            break
        next_t += args.interval
        time.sleep(max(0.0, next_t - time.monotonic()))
    stop.set()
    for t in threads:
        t.join(timeout=LOST_JOIN_S)
    stuck = sum(t.is_alive() for t in threads)
    if stuck:
        failures.append(f"FAIL: {stuck} client threads still running {LOST_JOIN_S:.0f} s after "
                        f"the end")
    probe.close()
    out.close()
    ok, lines = verdict(args, rows, stats, failures)
    if daemon.proc.poll() is None:
        line, settled = settles(pid, resting)
        lines.append(line)
        ok = ok and settled
        lines.append(at_rest(pid, not args.no_trim and shutil.which("gdb") is not None, args.out))
    return rows, stats, lines, ok


def settles(pid, resting):
    """Whether the daemon's RSS comes back within SETTLE_FACTOR of its resting size plus
    SETTLE_SLACK within SETTLE_S after the load (its idle trim, server/trim.h), and a line."""
    bound = resting * SETTLE_FACTOR + SETTLE_SLACK
    t0 = time.monotonic()
    while True:
        rss = rss_bytes(pid)
        if rss <= bound or time.monotonic() - t0 > SETTLE_S:
            break
        time.sleep(0.25)
    ok = rss <= bound
    return (f"{'settled' if ok else 'FAIL: not settled'}: VmRSS {rss / 1048576:.1f} MiB "
            f"{time.monotonic() - t0:.1f} s after the load, resting {resting / 1048576:.1f} MiB "
            f"(bound {bound / 1048576:.1f} MiB)"), ok


def at_rest(pid, trim, out_dir):
    """The daemon's RSS once every client has gone; with trim, also after malloc_trim(0) called
    through gdb (what glibc keeps of freed memory, its high-water mark, is given back) and the
    bytes malloc says are in use then (malloc_info): a leak shows in those, not in RSS alone."""
    time.sleep(2.0)
    line = f"at rest (every client gone): VmRSS {rss_bytes(pid) / 1048576:.1f} MiB, fds {fd_count(pid)}"
    if not trim:
        return line
    xml = os.path.abspath(os.path.join(out_dir, "malloc_info.xml"))
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch",
                            "-ex", "call (int) malloc_trim(0)",
                            "-ex", f'set $f = (void *) fopen("{xml}", "w")',
                            "-ex", "call (int) malloc_info(0, $f)",
                            "-ex", "call (int) fclose($f)"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return line + f"; gdb failed ({e})"
    if r.returncode != 0:
        return line + f"; gdb failed (status {r.returncode})"
    line += f"; after malloc_trim(0): VmRSS {rss_bytes(pid) / 1048576:.1f} MiB"
    in_use = malloc_in_use(xml)
    return line + (f", malloc in use {in_use / 1048576:.1f} MiB" if in_use is not None else "")


def malloc_in_use(path):
    """Bytes allocated and not freed, from malloc_info's totals: the arenas' current size less
    their free chunks, plus mmapped chunks."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    size = {(e.tag, e.get("type")): int(e.get("size")) for e in root if e.get("size")}
    try:
        return (size[("system", "current")] - size[("total", "fast")] - size[("total", "rest")]
                + size[("total", "mmap")])
    except KeyError:
        return None


LOST_JOIN_S = honest.LOST_AFTER_S + 10
# After the load, RSS back within 25% (+64 MiB) of its size before it, within SETTLE_S.
SETTLE_FACTOR, SETTLE_SLACK, SETTLE_S = 1.25, 64 << 20, 10.0


def verdict(args, rows, stats, failures):
    lines = list(failures)
    c = stats.snapshot()
    last = rows[-1] if rows else {}
    duration = args.minutes * 60
    lines.append("honest answers checked: " + ", ".join(f"{k} {c.get(k, 0)}" for k in honest.KINDS)
                 + f"; BUSY retried {c.get('busy', 0)}; wrong {c.get('wrong', 0)}; "
                 f"lost {c.get('lost', 0)}")
    lines.append("hostile: " + ", ".join(
        f"{k[2:]} {c.get(k, 0)}" for k in HOSTILE))
    if last:
        lines.append("daemon requests: " + ", ".join(
            f"{m} {last[f'req_{m}']}" for m in METHODS) + f"; all {last['requests']}")
        lines.append("daemon errors: " + (", ".join(
            f"{k} {last[f'err_{k}']}" for k in CODES if last[f"err_{k}"]) or "none"))
        lines.append("evictions: " + (", ".join(
            f"{k[6:]} {v}" for k, v in last.items() if k.startswith("evict:")) or "none reported")
            + f"; connections accepted {last['accepted']}, closed slow {last['closed_slow']}")
    ok = not failures
    for key in ("wrong", "lost", "h_unexpected"):
        if c.get(key, 0):
            ok = False
            lines.append(f"FAIL: {c[key]} {key}")
    judged = [r["status_ms"] for r in rows if r["t_s"] >= args.warmup * duration]
    if judged:
        lines.append(f"server.status latency after the warm-up: median "
                     f"{np.median(judged):.1f} ms, p99 {np.percentile(judged, 99):.1f} ms, "
                     f"max {max(judged):.1f} ms")
    lines.append("daemon log: " + log_levels(os.path.join(args.out, "krylovd.log")))
    for t, key, msg in stats.failures[:20]:
        lines.append(f"  {key}: {msg}")
    for k in honest.KINDS:
        if not c.get(k, 0) and not (args.no_drop and k in ("drop", "info")):
            ok = False
            lines.append(f"FAIL: no honest {k} answered")
    w = args.warmup * duration
    ref = [r for r in rows if w <= r["t_s"] < 2 * w]
    fin = [r for r in rows if r["t_s"] >= duration - w]
    if len(ref) < 3 or len(fin) < 3:
        ok = False
        lines.append(f"FAIL: too few samples ({len(ref)} reference, {len(fin)} last)")
        return ok, lines
    for key in WATCHED:
        a = float(np.median([r[key] for r in ref]))
        b = float(np.median([r[key] for r in fin]))
        grew = (b - a) / a if a > 0 else (0.0 if b <= a else float("inf"))
        bad = grew > args.tolerance and b - a > SLACK.get(key, 0)
        ok = ok and not bad
        peak = max(r[key] for r in rows)
        lines.append(f"{'FAIL' if bad else 'ok'}: {key} median {fmt(key, a)} (reference) -> "
                     f"{fmt(key, b)} (last window): {grew * 100:+.1f}% (limit "
                     f"{args.tolerance * 100:+.0f}%" + (f" or +{fmt(key, SLACK[key])}" if key in SLACK else "")
                     + f"); peak {fmt(key, peak)}")
    return ok, lines


def log_levels(path):
    """'warn 5, error 0' from the daemon's log (lines start with their level)."""
    counts = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                level = line.split(" ", 1)[0]
                if level in ("debug", "info", "warn", "error"):
                    counts[level] = counts.get(level, 0) + 1
    except OSError:
        return "unreadable"
    return ", ".join(f"{k} {v} lines" for k, v in sorted(counts.items())) or "empty"


def fmt(key, v):
    return f"{v / 1048576:.1f} MiB" if key.endswith("bytes") else f"{v:g}"


if __name__ == "__main__":
    sys.exit(main())
