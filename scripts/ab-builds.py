#!/usr/bin/env python3
"""Two espgw-lab builds side by side on one pinned core: `bench dataplane --no-raw`.

    python3 scripts/ab-builds.py BASE NEW --rounds 16 --algs aes-128-gcm,chacha20-poly1305 \\
        --sizes 64,1024 --directions outbound,inbound [--cpu 1] [--seconds 0.3] [--flows 1]

Each round runs both builds once, in turn, the order reversed every other round, so that a
machine drifting during the run weighs on both alike. Per row (suite, frame size, direction)
it prints the median Mpps of each build over the rounds, and the median of the per-round
ratios new / base with their range and how many rounds the new build was faster: on a
shared machine that drifts 20-30 % between trials, one pair of numbers says little.

It also reports how busy the other CPUs were during the trials (from /proc/stat): on this
project's 2-core VM a busy CPU 0 (a build, a fuzzer) slowed `bench dataplane` on CPU 1 from
8-11 to 6.3 Mpps (AES-128-GCM, 64 B, 2026-11-27), so trials taken beside other work are
flagged rather than silently mixed in.
"""

import argparse
import collections
import statistics
import subprocess
import sys


def cpu_times():
    """{cpu: (busy, total)} jiffies from /proc/stat: user, nice, system, idle, iowait, irq,
    softirq and steal (the guest fields that follow are already inside user and nice; steal,
    time the hypervisor gave elsewhere, counts as busy: it too is work beside the trial)."""
    times = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                v = [int(x) for x in fields[:8]]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                times[int(name[3:])] = (sum(v) - idle, sum(v))
    return times


def others_busy(before, after, cpu):
    """The busiest other CPU's share of busy time between two `cpu_times` readings."""
    shares = [
        (after[c][0] - before[c][0]) / max(1, after[c][1] - before[c][1])
        for c in after
        if c != cpu and c in before
    ]
    return max(shares, default=0.0)


def trial(binary, args):
    """One `bench dataplane` run of `binary`: {(suite, size, direction): Mpps}."""
    cmd = ["taskset", "-c", str(args.cpu), binary, "bench", "dataplane", "--no-raw",
           "--seconds", str(args.seconds), "--sizes", args.sizes, "--algs", args.algs,
           "--directions", args.directions, "--flows", args.flows]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1].isdigit() and f[2] in ("outbound", "inbound"):
            rows[(f[0], int(f[1]), f[2])] = float(f[3])
    if not rows:
        sys.exit(f"{binary}: no result rows in its output")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--algs", default="aes-128-gcm")
    p.add_argument("--sizes", default="64,1024")
    p.add_argument("--directions", default="outbound,inbound")
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--cpu", type=int, default=1)
    p.add_argument("--flows", default="each", help="bench dataplane --flows: each, or a count")
    args = p.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    rates = collections.defaultdict(lambda: ([], []))
    busiest = 0.0
    for r in range(args.rounds):
        order = [(0, args.base), (1, args.new)]
        if r % 2 == 1:
            order.reverse()
        before = cpu_times()
        got = {i: trial(b, args) for i, b in order}
        busiest = max(busiest, others_busy(before, cpu_times(), args.cpu))
        for key in got[0].keys() & got[1].keys():
            rates[key][0].append(got[0][key])
            rates[key][1].append(got[1][key])
    print(f"{args.rounds} rounds, builds alternating on CPU {args.cpu}: median Mpps of each, "
          "median of the per-round ratios new / base (range; rounds new faster)")
    for key in sorted(rates):
        base, new = rates[key]
        ratios = [n / b for b, n in zip(base, new) if b > 0]
        faster = sum(x > 1 for x in ratios)
        print(f"{key[0]:<32} {key[1]:>5} {key[2]:<8} {statistics.median(base):7.2f} "
              f"{statistics.median(new):7.2f}  {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}; {faster}/{len(ratios)})")
    print(f"busiest other CPU during a round: {busiest:.0%} busy"
          + ("  (other work ran beside the trials: the rates are low and noisy)" if busiest > 0.2 else ""))


if __name__ == "__main__":
    main()
