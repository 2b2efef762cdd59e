#!/usr/bin/env python3
"""Issue 14's per-suite target from `espgw-lab bench dataplane --algs all --json F` runs.

    python3 scripts/suite-ratios.py run1.json run2.json run3.json

Per row (suite, frame size, direction) the median over the runs of the pipeline's ratio to
the raw rate of the same suite, measured in the same run (a run with `--rounds R` gives each
row the median of R rounds that alternate the raw reference and the pipeline, each round's
pipeline set against that round's reference: one such run is steadier than several runs of
one round on a drifting machine, and its rounds' range is printed per row); the target is at least 0.6 at
1024 B and at least 0.4 at 64 B. AES-GCM has its own target (against DPDK ipsec-secgw) and
NULL has no crypto to compare with, so neither is counted. Prints how many rows meet the
target and every row that does not, with each run's ratio. Runs from builds that record how
busy the other CPUs were (`busiest_other_cpu_busy`) also get that figure per run, and a
warning when a neighbour was more than 20 % busy: beside other work the pipeline slows more
than the raw crypto, so the ratios read low.
"""

import json
import statistics
import sys

WANTED = {"64": 0.4, "1024": 0.6}
BUSY_WARNING = 0.20


def counted(algorithm):
    """Whether a row counts towards the target."""
    suite = algorithm.removeprefix("ah/")
    return algorithm != "null" and not suite.startswith(("aes-128-gcm", "aes-192-gcm", "aes-256-gcm"))


def main(paths):
    if not paths:
        sys.exit(__doc__)
    ratios = {}
    ranges = {}
    neighbours = []
    for path in paths:
        with open(path) as f:
            results = json.load(f)["results"]
        for row in results:
            key = (row["algorithm"], row["frame_size"], row["direction"])
            ratios.setdefault(key, []).append(row["ratio_to_raw_suite"])
            if row.get("rounds", 1) > 1:
                ranges.setdefault(key, []).append(
                    (row["ratio_to_raw_suite_low"], row["ratio_to_raw_suite_high"], row["rounds"]))
        busy = [r["busiest_other_cpu_busy"] for r in results
                if r.get("busiest_other_cpu_busy") is not None]
        if busy:
            neighbours.append((path, max(busy), statistics.median(busy)))
    rows = {k: v for k, v in ratios.items() if counted(k[0]) and k[1] in WANTED}
    below = []
    for (algorithm, size, direction), runs in sorted(rows.items()):
        median = statistics.median(runs)
        if median < WANTED[size]:
            below.append((algorithm, size, direction, median, runs))
    print(f"{len(rows) - len(below)} of {len(rows)} rows meet the target "
          f"(median of {len(paths)} runs: >= 0.6 at 1024 B, >= 0.4 at 64 B); below:")
    for algorithm, size, direction, median, runs in below:
        each = " ".join(f"{r:.3f}" for r in runs)
        spans = " ".join(f"{lo:.3f}-{hi:.3f}/{n}" for lo, hi, n in
                         ranges.get((algorithm, size, direction), []))
        print(f"  {algorithm:<30} {size:>5} {direction:<8} median {median:.3f}  runs {each}"
              + (f"  rounds' range {spans}" if spans else ""))
    for path, most, typical in neighbours:
        print(f"{path}: busiest other CPU {most * 100:.0f} % busy at most, "
              f"{typical * 100:.0f} % in the median row")
    if any(most > BUSY_WARNING for _, most, _ in neighbours):
        print("warning: another CPU was busy during some rows; their ratios read low "
              "(rerun with the other CPUs idle)")


if __name__ == "__main__":
    main(sys.argv[1:])
