#!/usr/bin/env python3
"""Judges the shared-memory transport's targets from chorus_bench JSON reports of one run.

    benchmarks/shm_targets.py --tcp T.json --shm S.json --latency L.json --oversubscribed O.json
                              [--shm-shared R.json]

T: 2 ranks over TCP, S: 2 ranks over shm (both up to 64 MiB, with the machine limits),
L: 2 ranks over shm at 8 B, O: 8 ranks over shm; R (optional): S again with the buffers in
shared memory (chorus_bench --buffers shared, with its own machine limits), judged on the two
64 MiB targets in two more lines. Prints one line per target with the figures it was judged on
and exits 0 whatever the verdicts (they are measurements, not test results); exit 2 for a
report that lacks a row the targets need.
"""
import argparse
import json
import sys

MIB64 = 64 << 20
LATENCY_REGION = 64 << 10  # bytes up to which a row measures latency rather than bandwidth


def load_run(path):
    with open(path) as f:
        report = json.load(f)
    runs = [r for r in report["runs"] if r["collective"] == "allreduce"]
    if not runs:
        sys.exit(f"{path}: no allreduce run")
    return report, runs[0]


def row(run, size, path):
    for r in run["rows"]:
        if r["bytes"] == size:
            return r
    sys.exit(f"{path}: no {size}-byte row")


def best_busbw(r):
    """The better of the two modes: the targets ask what the transport can reach."""
    return max(m["busbw_gbps"] for m in (r["out_of_place"], r["in_place"]) if m)


def best_time(r):
    return min(m["time_us"] for m in (r["out_of_place"], r["in_place"]) if m)


def cliffs(run):
    """Steps inside the latency region where time grows faster than bytes do."""
    rows = sorted((r for r in run["rows"] if r["bytes"] <= LATENCY_REGION), key=lambda r: r["bytes"])
    found = []
    for a, b in zip(rows, rows[1:]):
        size_ratio = b["bytes"] / max(a["bytes"], 1)
        time_ratio = best_time(b) / best_time(a)
        if time_ratio > size_ratio:
            found.append(f"{a['bytes']}->{b['bytes']} B: time x{time_ratio:.1f}")
    return found, rows


def verdict(ok):
    return "met" if ok else "MISSED"


def bandwidth_lines(label, shm, tcp64, path):
    """The two 64 MiB targets of one shm report (which carries its own machine limits)."""
    shm_report, shm_run = shm
    limits = shm_report.get("limits") or {}
    if "memcpy_gbps" not in limits:
        sys.exit(f"{path}: no machine limits (run without --limits 0)")
    shm64 = best_busbw(row(shm_run, MIB64, path))
    memcpy = limits["memcpy_gbps"]
    return [
        f"64 MiB, 2 ranks, {label} >= 3x tcp busbw: {shm64:.2f} vs {tcp64:.2f} GB/s "
        f"= {shm64 / tcp64:.2f}x -> {verdict(shm64 >= 3 * tcp64)}",
        f"64 MiB, 2 ranks, {label} >= 60% of memcpy: {shm64:.2f} of {memcpy:.2f} GB/s "
        f"= {100 * shm64 / memcpy:.0f}% -> {verdict(shm64 >= 0.6 * memcpy)}",
    ]


def judge(tcp, shm, latency, oversubscribed, paths, shared=None):
    shm_report, _ = shm
    _, tcp_run = tcp
    _, lat_run = latency
    _, over_run = oversubscribed
    tcp64 = best_busbw(row(tcp_run, MIB64, paths[0]))
    eight = best_time(row(lat_run, 8, paths[2]))
    found, rows = cliffs(over_run)
    lines = bandwidth_lines("shm", shm, tcp64, paths[1]) + [
        f"8 B, 2 ranks, shm <= 1 us: {eight:.2f} us -> {verdict(eight <= 1.0)}",
        f"8 ranks on {shm_report['machine'].get('online_cores', '?')} cores, no latency cliff "
        f"up to {LATENCY_REGION // 1024} KiB: {best_time(rows[0]):.1f}-{best_time(rows[-1]):.1f} us"
        f"{'; ' + ', '.join(found) if found else ''} -> {verdict(not found)}",
    ]
    if shared is not None:
        lines += bandwidth_lines("shm with shared-memory buffers", shared, tcp64, paths[4])
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("tcp", "shm", "latency", "oversubscribed"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--shm-shared")
    args = parser.parse_args(argv)
    paths = [args.tcp, args.shm, args.latency, args.oversubscribed, args.shm_shared]
    shared = load_run(args.shm_shared) if args.shm_shared else None
    for line in judge(*(load_run(p) for p in paths[:4]), paths, shared):
        print(line)


if __name__ == "__main__":
    main()
