#!/usr/bin/env python3
"""Chorus, Open MPI and Gloo side by side from benchmark JSON files (schema chorus-bench/1),
as benchmarks/run_latency_comparison.sh writes them:

    benchmarks/side_by_side.py [--coll allreduce] [--markdown-out FILE] FILE.json...

Each file is one round of one library (chorus-bench, mpi-bench or gloo-bench). A cell is a
rank count, a transport and a size; its time is the in-place one (the mode all three have:
Gloo's algorithms reduce in place only). Within a file the best run counts (for Gloo, the
fastest of its algorithms at that size); over the files of one library, the median. Rows with
wrong elements are left out. The markdown table names, per cell, the faster of Chorus and the
best other library and the ratio of their times, counts the cells Chorus wins and loses, and is
headed by the machine limits from the Chorus file that measured them.
"""

import argparse
import statistics
import sys

from compare import CompareError, load  # the one reader of the report schema

LIBRARIES = ("chorus", "openmpi", "gloo")
NAMES = {"chorus": "Chorus", "openmpi": "MPI", "gloo": "Gloo"}  # in the winner column
FULL_NAMES = {"chorus": "Chorus", "openmpi": "Open MPI", "gloo": "Gloo"}
TRANSPORT_ORDER = {"tcp": 0, "shm": 1}


class SideBySideError(CompareError):
    pass


def choose_collective(reports, requested):
    found = sorted({run["collective"] for _, report in reports for run in report["runs"]})
    if requested is not None:
        if requested not in found:
            raise SideBySideError("no run measures %s (the files have: %s)"
                                  % (requested, ", ".join(found) or "none"))
        return requested
    if len(found) != 1:
        raise SideBySideError("the files measure %s; choose one with --coll"
                              % ", ".join(found or ["nothing"]))
    return found[0]


def collect(reports, collective):
    """{(library, ranks, transport, bytes): [one time per file]}, plus the rows left out as
    wrong, as (path, library, ranks, transport, bytes)."""
    times = {}
    wrong = []
    for path, report in reports:
        best = {}  # this file's fastest run per cell
        for run in report["runs"]:
            library = run["library"]
            if run["collective"] != collective or library not in LIBRARIES:
                continue
            for row in run["rows"]:
                m = row.get("in_place")
                if m is None or m.get("time_us") is None:
                    continue
                key = (library, run["ranks"], run["transport"], row["bytes"])
                if m.get("wrong"):
                    wrong.append((path,) + key)
                    continue
                best[key] = min(best.get(key, m["time_us"]), m["time_us"])
        for key, time_us in best.items():
            times.setdefault(key, []).append(time_us)
    return times, wrong


def verdict(chorus, others):
    """(winner text, outcome for Chorus: "won", "lost", "tie" or None when there is nothing to
    compare, the fastest other library or None).

    others: {library: time or None}. The ratio is the slower of Chorus and the fastest other
    library over the faster, so it reads as how far Chorus is ahead or behind."""
    others = {library: t for library, t in others.items() if t is not None}
    if chorus is None or not others:
        return "-", None, None
    rival = min(others, key=lambda library: others[library])
    if others[rival] == chorus:
        return "tie", "tie", rival
    if chorus < others[rival]:
        return "Chorus by %s" % format_ratio(others[rival] / chorus), "won", rival
    return "%s by %s" % (NAMES[rival], format_ratio(chorus / others[rival])), "lost", rival


def format_ratio(ratio):
    return "%.2fx" % ratio if ratio < 10 else "%.0fx" % ratio


def format_time(us):
    if us is None:
        return "-"
    if us >= 10000:
        return "%.0f" % us
    if us >= 100:
        return "%.1f" % us
    return "%.2f" % us


def format_size(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def limits_block(reports):
    """The machine and its limits from the first Chorus file that measured them."""
    for path, report in reports:
        if not report.get("limits") or not any(r["library"] == "chorus"
                                               for r in report["runs"]):
            continue
        limits, machine = report["limits"], report.get("machine", {})

        def value(key, pattern):
            v = limits.get(key)
            return pattern % v if v is not None else "n/a"

        return [
            "Machine: %s, %s, %s cores (limits measured by %s)" % (
                machine.get("hostname", "?"), machine.get("cpu_model", "?"),
                machine.get("online_cores", "?"), path),
            "",
            "| limit | value |",
            "|---|---:|",
            "| memcpy, 1 core | %s GB/s |" % value("memcpy_gbps", "%.2f"),
            "| float32 sum c=a+b, 1 core | %s GB/s |" % value("reduce_float_sum_gbps", "%.2f"),
            "| loopback TCP, one stream | %s GB/s |" % value("tcp_one_way_gbps", "%.2f"),
            "| loopback TCP, both directions | %s GB/s each |"
            % value("tcp_bidirectional_gbps_per_direction", "%.2f"),
            "| loopback TCP 8 B round trip, blocking | %s us |"
            % value("tcp_rtt_median_us", "%.1f"),
            "| loopback TCP 8 B round trip, busy polling | %s us |"
            % value("tcp_rtt_busy_poll_median_us", "%.1f"),
            "| cache-line handoff, one way | %s ns |"
            % value("cache_line_handoff_median_ns", "%.0f"),
        ]
    return ["Machine limits: not measured (no Chorus file has them; run one with --limits 1)."]


def versions(reports):
    found = {}
    for _, report in reports:
        for run in report["runs"]:
            found.setdefault(run["library"], set()).add(run.get("library_version", "?"))
    return ", ".join("%s %s" % (FULL_NAMES[library], "/".join(sorted(found[library])))
                     for library in LIBRARIES if library in found)


def side_by_side(reports, collective):
    times, wrong = collect(reports, collective)
    # A library's round count: the most samples any cell of it has.
    rounds = {library: max([len(samples) for key, samples in times.items() if key[0] == library],
                           default=0)
              for library in LIBRARIES}
    cells = sorted({key[1:] for key in times},
                   key=lambda cell: (cell[0], TRANSPORT_ORDER.get(cell[1], 9), cell[1], cell[2]))
    if not cells:
        raise SideBySideError("no %s rows in the files" % collective)

    lines = ["%s, in-place time in us: median over rounds (Gloo: its best algorithm per "
             "size and round)." % collective.capitalize(), ""]
    lines += limits_block(reports)
    lines += ["", "Libraries: %s." % versions(reports),
              "Rounds: %s." % ", ".join("%s %d" % (FULL_NAMES[library], rounds[library])
                                        for library in LIBRARIES if rounds[library]),
              "Winner: the faster of Chorus and the fastest other library, by the ratio of "
              "their times.", ""]
    lines += ["| ranks | transport | size | Chorus us | Open MPI us | Gloo best us | winner |",
              "|---:|---|---:|---:|---:|---:|---|"]
    outcomes = {"won": 0, "lost": 0, "tie": 0}
    lost_to = {library: 0 for library in LIBRARIES}
    short = False
    for ranks, transport, size in cells:
        median = {}
        text = {}
        for library in LIBRARIES:
            samples = times.get((library, ranks, transport, size))
            median[library] = statistics.median(samples) if samples else None
            text[library] = format_time(median[library])
            if samples and len(samples) < rounds[library]:
                text[library] += "*"
                short = True
        winner, outcome, rival = verdict(
            median["chorus"], {library: median[library] for library in LIBRARIES[1:]})
        if outcome is not None:
            outcomes[outcome] += 1
        if outcome == "lost":
            lost_to[rival] += 1
        lines.append("| %d | %s | %s | %s | %s | %s | %s |" % (
            ranks, transport, format_size(size), text["chorus"], text["openmpi"], text["gloo"],
            winner))
    lines.append("")
    if short:
        lines.append("\\* median of fewer rounds than the library ran (a run failed or left "
                     "the size out).")
    if wrong:
        lines.append("Left out for wrong elements: %s." % "; ".join(
            "%s %s %d ranks %s %s" % (path, NAMES[library], ranks, transport, format_size(size))
            for path, library, ranks, transport, size in wrong))
    lines.append("Chorus wins %d of the %d cells it shares with another library, loses %d "
                 "(to MPI %d, to Gloo %d), ties %d." % (
                     outcomes["won"], sum(outcomes.values()), outcomes["lost"],
                     lost_to["openmpi"], lost_to["gloo"], outcomes["tie"]))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="JSON reports, one round of one library each")
    parser.add_argument("--coll", help="collective (default: the one the files measure)")
    parser.add_argument("--markdown-out", metavar="FILE", help="also write the table to FILE")
    args = parser.parse_args(argv)
    try:
        reports = [(path, load(path)) for path in args.files]
        text = side_by_side(reports, choose_collective(reports, args.coll))
        if args.markdown_out:
            try:
                with open(args.markdown_out, "w") as f:
                    f.write(text)
            except OSError as error:
                raise SideBySideError("cannot write %s: %s" % (args.markdown_out, error))
    except CompareError as error:
        sys.stderr.write("side_by_side.py: %s\n" % error)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
