#!/usr/bin/env python3
"""read-hops.py -- where a pre-copy read's time goes, hop by hop.

Runs one vgmig-bench cell with the source QEMU traced and both servers
logging at trace level (or reads the logs of a cell kept earlier), matches
each pre-copy read's request and reply by its vfio-user id, and splits its
turnaround into hops. docs/data-path.md ("A slow read's hops") uses it.
"""
import argparse
import collections
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

USAGE_TAIL = """\
A read's turnaround runs from when its server could start it (its request
written by QEMU and the read before it answered) to its reply's header
read by QEMU's vfio-user iothread.  Its hops:
  in     QEMU wrote the request -> the server's control loop read it
  queue  the data plane could start it -> the plane started it
  serve  the plane's work: the device's copy and the piece hashes
  out    the reply was sent -> QEMU's iothread read its header
For each server's data plane it also prints the time it was busy and the
time it was idle with no request read yet or with one queued.

Run mode needs $VGMIG_QEMU and $VGMIG_SERVER (as vgmig-bench does); the
cell's directory is kept (its path is printed).  BENCH_ARG are
vgmig-bench's options for one cell of one vGPU, e.g.
  bench/read-hops.py -- --sizes 1G --big 1G --workloads idle --modes ours
--keep and --no-ram-anchor are added.

Exit status: 0; 1 if the run failed or its logs hold no pre-copy read;
2 on bad usage.
"""

QEMU_EVENTS = ("vfio_user_send_write", "vfio_user_recv_hdr",
               "vfio_migration_set_state")
MIG_DATA_READ_SHM = 0x16
SERVER_LINE = re.compile(
    r"^\[(\d+\.\d+)\] .*trace: (?:plane: )?request (\d+) "
    r"(MIG_DATA_READ_SHM|MIG_DATA_WRITE_SHM) (size|started|replying)")
HOPS = ("in", "queue", "serve", "out")


def fail(msg, status=1):
    print("read-hops: " + msg, file=sys.stderr)
    sys.exit(status)


def qemu_events(path):
    """(time, event, args) of the traced events in a QEMU log."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            p = line.split(None, 2)
            if len(p) < 2 or not p[0].endswith("Z") or p[1] not in QEMU_EVENTS:
                continue
            t = datetime.datetime.strptime(p[0], "%Y-%m-%dT%H:%M:%S.%fZ")
            t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
            out.append((t, p[1], p[2] if len(p) > 2 else ""))
    return out


def server_requests(path, command):
    """id -> {size, started, replied} times of @command's requests."""
    reqs = collections.defaultdict(dict)
    with open(path, errors="replace") as f:
        for line in f:
            m = SERVER_LINE.match(line)
            if m and m.group(3) == command:
                reqs[int(m.group(2))][m.group(4)] = float(m.group(1))
    return {i: r for i, r in reqs.items() if len(r) == 3}


def precopy(reqs, stop):
    """The requests read before @stop, in the order served."""
    rs = [kv for kv in reqs.items() if kv[1]["size"] < stop]
    return sorted(rs, key=lambda kv: kv[1]["started"])


def stop_time(events):
    """When QEMU set the device to STOP_COPY (the pre-copy's end)."""
    for t, name, args in events:
        if name == "vfio_migration_set_state" and "STOP_COPY" in args:
            return t
    return float("inf")


def qemu_times(events):
    """id -> time written, id -> time a read's reply header was read."""
    sent, replied = {}, {}
    for t, name, args in events:
        if name == "vfio_migration_set_state" and "STOP_COPY" in args:
            break
        if name == "vfio_user_send_write":
            sent[int(args.split()[1], 16)] = t
        elif name == "vfio_user_recv_hdr" and \
                " cmd 0x%x " % MIG_DATA_READ_SHM in args:
            replied[int(args.split("id ")[1].split()[0], 16)] = t
    return sent, replied


def hops(reads, sent, replied):
    """One dict of hop times (s) per read that both sides logged."""
    rows, prev_reply, prev_recv = [], 0.0, 0.0
    for rid, s in reads:
        if rid not in sent or rid not in replied:
            continue
        q_sent, q_recv = sent[rid], replied[rid]
        rows.append({
            "in": s["size"] - q_sent,
            "queue": s["started"] - max(s["size"], prev_reply),
            "serve": s["replying"] - s["started"],
            "out": q_recv - s["replying"],
            "turn": q_recv - max(q_sent, prev_recv),
        })
        prev_reply, prev_recv = s["replying"], q_recv
    return rows


def plane_split(reqs):
    """(requests, busy, idle without a request, idle with one) in s."""
    busy = no_req = queued = 0.0
    for (_, a), (_, b) in zip(reqs, reqs[1:]):
        busy += a["replying"] - a["started"]
        if b["size"] > a["replying"]:
            no_req += b["size"] - a["replying"]
            queued += b["started"] - b["size"]
        else:
            queued += b["started"] - a["replying"]
    if reqs:
        busy += reqs[-1][1]["replying"] - reqs[-1][1]["started"]
    return len(reqs), busy, no_req, queued


def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p))]


def report(rows, slow_ms, planes):
    ms = 1e3
    print("pre-copy reads: %d" % len(rows))
    print("%-6s %9s %9s %9s %9s %10s" %
          ("hop", "median", "p90", "p99", "max", "sum"))
    for k in HOPS + ("turn",):
        v = sorted(r[k] * ms for r in rows)
        print("%-6s %9.3f %9.3f %9.3f %9.3f %10.1f ms" %
              (k, pct(v, .5), pct(v, .9), pct(v, .99), v[-1], sum(v)))
    slow = [r for r in rows if r["turn"] * ms > slow_ms]
    largest = collections.Counter(max(HOPS, key=lambda k: r[k]) for r in slow)
    print("slow reads (turnaround > %.2f ms): %d, %.1f ms in all; "
          "largest hop: %s" % (slow_ms, len(slow),
                               sum(r["turn"] for r in slow) * ms,
                               ", ".join("%s %d" % (k, largest[k])
                                         for k in HOPS)))
    for side, (n, busy, no_req, queued) in planes:
        print("%s plane: %d requests, busy %.1f ms, idle %.1f ms with no "
              "request read, %.1f ms with one queued" %
              (side, n, busy * ms, no_req * ms, queued * ms))


def wrappers(tmp, qemu, server):
    """Scripts standing in for QEMU and the server, tracing them."""
    events = os.path.join(tmp, "events")
    with open(events, "w") as f:
        f.write("\n".join(QEMU_EVENTS) + "\n")
    q = os.path.join(tmp, "qemu")
    s = os.path.join(tmp, "server")
    with open(q, "w") as f:
        f.write('#!/bin/sh\nexec %s -trace %s "$@"\n' %
                (shlex.quote(qemu), shlex.quote("events=" + events)))
    with open(s, "w") as f:
        f.write('#!/bin/sh\nVGMIG_LOG_TIME=1 exec %s "$@" '
                '--log-level trace\n' % shlex.quote(server))
    os.chmod(q, 0o755)
    os.chmod(s, 0o755)
    return q, s


def run_cell(bench, bench_args):
    """Run the cell traced; the kept cell directory."""
    for var in ("VGMIG_QEMU", "VGMIG_SERVER"):
        if not os.environ.get(var):
            fail("$%s is not set" % var, 2)
    tmp = tempfile.mkdtemp(prefix="read-hops-")
    try:
        q, s = wrappers(tmp, os.environ["VGMIG_QEMU"],
                        os.environ["VGMIG_SERVER"])
        env = dict(os.environ, VGMIG_QEMU=q, VGMIG_SERVER=s)
        cmd = [bench] + bench_args + ["--keep", "--no-ram-anchor",
                                      "--out", os.path.join(tmp, "out")]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kept = re.findall(r"logs kept in (\S+)", p.stderr)
    if p.returncode != 0 or not kept:
        sys.stderr.write(p.stdout + p.stderr)
        fail("%s exited %d%s" % (bench, p.returncode,
                                 "" if kept else ", no cell kept"))
    print("cell directory: %s" % kept[0])
    return kept[0]


def analyse(cell, slow_ms):
    paths = {n: os.path.join(cell, n) for n in
             ("qemu-vgpu-src.log", "vgpu-src.log", "vgpu-dst.log")}
    for p in paths.values():
        if not os.path.isfile(p):
            fail("%s: no such file (not a kept cell of one vGPU?)" % p)
    events = qemu_events(paths["qemu-vgpu-src.log"])
    stop = stop_time(events)
    reads = precopy(server_requests(paths["vgpu-src.log"],
                                    "MIG_DATA_READ_SHM"), stop)
    writes = precopy(server_requests(paths["vgpu-dst.log"],
                                     "MIG_DATA_WRITE_SHM"), stop)
    sent, replied = qemu_times(events)
    rows = hops(reads, sent, replied)
    if not rows:
        fail("%s: no pre-copy read found in both QEMU's trace and the "
             "server's log" % cell)
    report(rows, slow_ms, (("source", plane_split(reads)),
                           ("destination", plane_split(writes))))


def main():
    ap = argparse.ArgumentParser(
        prog="read-hops.py",
        usage="%(prog)s [--slow MS] [--bench PATH] -- BENCH_ARG...\n"
              "       %(prog)s [--slow MS] --cell DIR",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        epilog=USAGE_TAIL, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slow", type=float, default=0.35, metavar="MS",
                    help="a read is slow past this turnaround (default 0.35)")
    ap.add_argument("--bench", default="build/vgmig-bench", metavar="PATH",
                    help="vgmig-bench to run (default build/vgmig-bench)")
    ap.add_argument("--cell", metavar="DIR",
                    help="analyse this kept cell directory instead of running")
    ap.add_argument("bench_args", nargs="*", metavar="BENCH_ARG")
    a = ap.parse_args()
    if a.slow <= 0:
        ap.error("--slow: %g is not a positive number of ms" % a.slow)
    if bool(a.cell) == bool(a.bench_args):
        ap.error("give either --cell DIR or vgmig-bench's options after --")
    analyse(a.cell or run_cell(a.bench, a.bench_args), a.slow)


if __name__ == "__main__":
    main()
