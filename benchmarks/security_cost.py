#!/usr/bin/env python3
"""Summarises benchmarks/run_security.sh: for each size, the median in-place allreduce time of
each mode (plain, secret, tls, tls+secret) over the rounds, its busbw, and its time against
plain's. Usage: security_cost.py RESULTS_DIR (holding <mode>-<round>.json)."""
import glob
import json
import os
import statistics
import sys

MODES = ["plain", "secret", "tls", "tls+secret"]


def load(directory):
    times = {}  # (mode, bytes) -> [time_us]
    busbw = {}
    for path in glob.glob(os.path.join(directory, "*.json")):
        mode = os.path.basename(path).rsplit("-", 1)[0]
        with open(path) as f:
            report = json.load(f)
        for run in report["runs"]:
            for row in run["rows"]:
                if row["in_place"]["wrong"] != 0:
                    sys.exit(f"{path}: {row['bytes']} B has wrong elements")
                key = (mode, row["bytes"])
                times.setdefault(key, []).append(row["in_place"]["time_us"])
                busbw.setdefault(key, []).append(row["in_place"]["busbw_gbps"])
    return times, busbw


def main():
    times, busbw = load(sys.argv[1])
    sizes = sorted({size for _, size in times})
    header = f"{'size (B)':>10}" + "".join(f" {m + ' us':>14} {'GB/s':>6}" for m in MODES)
    print(header + "".join(f" {m + '/plain':>17}" for m in MODES[1:]))
    for size in sizes:
        line = f"{size:>10}"
        medians = {}
        for mode in MODES:
            if (mode, size) not in times:
                line += f" {'-':>14} {'-':>6}"
                continue
            medians[mode] = statistics.median(times[(mode, size)])
            line += f" {medians[mode]:>14.1f} {statistics.median(busbw[(mode, size)]):>6.2f}"
        for mode in MODES[1:]:
            ratio = medians.get(mode, 0) / medians["plain"] if "plain" in medians else 0
            line += f" {ratio:>16.2f}x"
        print(line)


if __name__ == "__main__":
    main()
