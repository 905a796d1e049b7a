#!/usr/bin/env python3
"""Side-by-side comparison of two benchmark JSON files (schema chorus-bench/1), usually one
from chorus-bench and one from gloo-bench:

    benchmarks/compare.py chorus.json gloo.json [--coll allreduce] [--algo-a ring]
                          [--algo-b ring] [--mode in_place|out_of_place]

For every pair of selected runs (one from each file, same collective) it prints, per size,
both times and bus bandwidths and the ratio busbw(A) / busbw(B): above 1 means A is faster.
The default mode is in_place, the only one Gloo's algorithms have.
"""

import argparse
import json
import sys

SCHEMA = "chorus-bench/1"


class CompareError(Exception):
    pass


def load(path):
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as error:
        raise CompareError("cannot read %s: %s" % (path, error))
    if report.get("schema") != SCHEMA:
        raise CompareError("%s is not a %s report (schema %r)"
                           % (path, SCHEMA, report.get("schema")))
    return report


def select_runs(report, path, collective, algorithm):
    runs = [run for run in report["runs"]
            if (collective is None or run["collective"] == collective)
            and (algorithm is None or run["algorithm"] == algorithm)]
    if not runs:
        available = ", ".join("%s/%s" % (r["collective"], r["algorithm"]) for r in report["runs"])
        raise CompareError("%s has no run matching collective=%s algorithm=%s (it has: %s)"
                           % (path, collective or "any", algorithm or "any", available or "none"))
    return runs


def run_label(run):
    return "%s %s" % (run["library"], run["algorithm"])


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(value, pattern):
    return pattern % value if value is not None else "-"


def measurement(row, mode):
    if row is None or row.get(mode) is None:
        return None, None
    m = row[mode]
    return m["time_us"], m["busbw_gbps"]


def compare_runs(run_a, run_b, mode):
    """Rows of (bytes, time_a, busbw_a, time_b, busbw_b, ratio) over the union of sizes."""
    rows_a = {row["bytes"]: row for row in run_a["rows"]}
    rows_b = {row["bytes"]: row for row in run_b["rows"]}
    table = []
    for size in sorted(set(rows_a) | set(rows_b)):
        time_a, busbw_a = measurement(rows_a.get(size), mode)
        time_b, busbw_b = measurement(rows_b.get(size), mode)
        # Barrier moves no bytes: compare its times instead (B's time / A's time).
        if run_a["collective"] == "barrier":
            table.append((size, time_a, busbw_a, time_b, busbw_b, ratio(time_b, time_a)))
        else:
            table.append((size, time_a, busbw_a, time_b, busbw_b, ratio(busbw_a, busbw_b)))
    return table


def limits_line(report):
    limits = report.get("limits")
    if not limits:
        return "limits not measured"
    return ("memcpy %.2f GB/s, reduce %.2f GB/s, tcp one-way %.2f GB/s, bidir %.2f GB/s/dir, "
            "rtt %.1f us" % (limits["memcpy_gbps"], limits["reduce_float_sum_gbps"],
                             limits["tcp_one_way_gbps"],
                             limits["tcp_bidirectional_gbps_per_direction"],
                             limits["tcp_rtt_median_us"]))


def format_comparison(report_a, run_a, report_b, run_b, mode):
    label_a, label_b = run_label(run_a), run_label(run_b)
    quantity = "time(B) / time(A)" if run_a["collective"] == "barrier" else "busbw(A) / busbw(B)"
    lines = [
        "# A: %s, %s, %d ranks, transport %s (%s)" % (
            label_a, run_a["collective"], run_a["ranks"], run_a["transport"],
            limits_line(report_a)),
        "# B: %s, %s, %d ranks, transport %s (%s)" % (
            label_b, run_b["collective"], run_b["ranks"], run_b["transport"],
            limits_line(report_b)),
        "# %s; ratio = %s, above 1: A is faster" % (mode.replace("_", "-"), quantity),
    ]
    if run_a["ranks"] != run_b["ranks"]:
        lines.append("# WARNING: different rank counts (%d vs %d); the ratio mixes them"
                     % (run_a["ranks"], run_b["ranks"]))
    if report_a["machine"].get("hostname") != report_b["machine"].get("hostname"):
        lines.append("# WARNING: measured on different machines (%s vs %s)"
                     % (report_a["machine"].get("hostname"), report_b["machine"].get("hostname")))
    lines.append("#%11s  %11s  %11s  %11s  %11s  %7s" % (
        "size (B)", "A time(us)", "A busbw", "B time(us)", "B busbw", "ratio"))
    table = compare_runs(run_a, run_b, mode)
    for size, time_a, busbw_a, time_b, busbw_b, r in table:
        lines.append("%12d  %11s  %11s  %11s  %11s  %7s" % (
            size, fmt(time_a, "%.2f"), fmt(busbw_a, "%.4g"), fmt(time_b, "%.2f"),
            fmt(busbw_b, "%.4g"), fmt(r, "%.2f")))
    ratios = [r for *_, r in table if r is not None]
    if ratios:
        geometric = 1.0
        for r in ratios:
            geometric *= r
        geometric **= 1.0 / len(ratios)
        lines.append("# geometric mean ratio over %d sizes: %.2f" % (len(ratios), geometric))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="first JSON report (e.g. chorus-bench --json)")
    parser.add_argument("b", help="second JSON report (e.g. gloo-bench --json)")
    parser.add_argument("--coll", help="collective to compare (default: every common one)")
    parser.add_argument("--algo-a", help="algorithm of A (default: every run)")
    parser.add_argument("--algo-b", help="algorithm of B (default: every run)")
    parser.add_argument("--mode", choices=("in_place", "out_of_place"), default="in_place")
    args = parser.parse_args(argv)
    try:
        report_a, report_b = load(args.a), load(args.b)
        runs_a = select_runs(report_a, args.a, args.coll, args.algo_a)
        runs_b = select_runs(report_b, args.b, args.coll, args.algo_b)
        pairs = [(a, b) for a in runs_a for b in runs_b if a["collective"] == b["collective"]]
        if not pairs:
            raise CompareError("no collective is measured in both files")
        sys.stdout.write("\n".join(format_comparison(report_a, a, report_b, b, args.mode)
                                   for a, b in pairs))
    except CompareError as error:
        sys.stderr.write("compare.py: %s\n" % error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
