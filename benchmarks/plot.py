#!/usr/bin/python3
"""Plots bus bandwidth against message size (log-log), one line per run (library and
algorithm), from one or more benchmark JSON files (schema chorus-bench/1):

    benchmarks/plot.py -o busbw.png chorus.json gloo.json [--coll allreduce] [--mode in_place]

The machine's loopback TCP limits from the first file that has them are drawn as dashed lines,
so a curve reads as a fraction of what the host can move. Needs Debian's python3-matplotlib,
hence the /usr/bin/python3 interpreter line (a python3 earlier on PATH may lack it).
"""

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display
import matplotlib.pyplot as plt  # noqa: E402

from compare import CompareError, load  # noqa: E402


def series(run, mode):
    """(sizes, busbw) of the rows measured in `mode` with a positive bandwidth."""
    points = [(row["bytes"], row[mode]["busbw_gbps"]) for row in run["rows"]
              if row.get(mode) and row[mode]["busbw_gbps"]]
    return [p[0] for p in points], [p[1] for p in points]


def plot(reports, collective, mode, output):
    figure, axes = plt.subplots(figsize=(13, 6))
    plotted = 0
    collectives = set()
    limits = next((r["limits"] for r in reports if r.get("limits")), None)
    for report in reports:
        for run in report["runs"]:
            if collective and run["collective"] != collective:
                continue
            sizes, busbw = series(run, mode)
            if not sizes:
                continue
            label = "%s %s %s (%d ranks)" % (run["library"], run["collective"],
                                              run["algorithm"], run["ranks"])
            axes.plot(sizes, busbw, marker="o", markersize=3, label=label)
            plotted += 1
            collectives.add(run["collective"])
    if plotted == 0:
        raise CompareError("no run with %s measurements%s" % (
            mode, " of " + collective if collective else ""))
    if limits:
        axes.axhline(limits["tcp_one_way_gbps"], linestyle="--", color="gray",
                     label="tcp loopback one-way %.2f GB/s" % limits["tcp_one_way_gbps"])
        axes.axhline(limits["tcp_bidirectional_gbps_per_direction"], linestyle=":",
                     color="gray", label="tcp loopback bidirectional %.2f GB/s per direction"
                     % limits["tcp_bidirectional_gbps_per_direction"])
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
    axes.set_title("%s, %s" % (", ".join(sorted(collectives)), mode.replace("_", "-")))
    axes.grid(True, which="both", alpha=0.3)
    # Beside the axes, not over them: a comparison has a line per algorithm and library.
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(output, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return plotted


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="JSON reports")
    parser.add_argument("-o", "--output", required=True, help="PNG file to write")
    parser.add_argument("--coll", help="only this collective")
    parser.add_argument("--mode", choices=("in_place", "out_of_place"), default="in_place")
    args = parser.parse_args(argv)
    try:
        count = plot([load(path) for path in args.reports], args.coll, args.mode, args.output)
    except CompareError as error:
        sys.stderr.write("plot.py: %s\n" % error)
        return 1
    print("plot.py: %d run(s) plotted to %s" % (count, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
