#!/usr/bin/env python3
"""Each CPU's busy share in the busiest seconds of every live step of a 16-core visit.

Reads the `stat.raw` (a `T <epoch>` line, then every `cpuN` line of /proc/stat, once a second)
and `steps.txt` (`NAME start|end <epoch>`) that scripts/remote-bench/per-worker-16.sh writes
under $OUT. A quick throughput search offers several rates in turn, so a step's mean says
little; its busiest seconds (by the sum over all CPUs) are the trials near its top rate.
For each step this prints, over its TOP busiest seconds (default 3), each CPU's mean busy
percentage (user + system + irq + softirq + steal over the whole line) and, after a slash,
its softirq percentage (the kernel's veth and XDP work shows there).

    python3 scripts/remote-bench/busiest-second.py DIR [TOP]
"""

import sys
from pathlib import Path

# /proc/stat columns after the name: user nice system idle iowait irq softirq steal guest
# guest_nice; guest time is already counted in user.
BUSY = (0, 1, 2, 5, 6, 7)
SOFTIRQ = 6


def samples(path):
    """[(epoch, {cpu: [counters]})] in file order."""
    out = []
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "T":
            out.append((float(fields[1]), {}))
        elif fields[0].startswith("cpu") and out:
            out[-1][1][int(fields[0][3:])] = [int(x) for x in fields[1:9]]
    return out


def seconds(stats):
    """Per interval between two samples: (middle epoch, {cpu: (busy %, softirq %)})."""
    out = []
    for (t0, a), (t1, b) in zip(stats, stats[1:]):
        per_cpu = {}
        for cpu in sorted(set(a) & set(b)):
            delta = [y - x for x, y in zip(a[cpu], b[cpu])]
            total = sum(delta) or 1
            busy = sum(delta[i] for i in BUSY)
            per_cpu[cpu] = (100.0 * busy / total, 100.0 * delta[SOFTIRQ] / total)
        out.append(((t0 + t1) / 2, per_cpu))
    return out


def steps(path):
    """[(name, start, end)] in file order."""
    starts, out = {}, []
    for line in Path(path).read_text().splitlines():
        name, kind, when = line.split()
        if kind == "start":
            starts[name] = float(when)
        elif name in starts:
            out.append((name, starts.pop(name), float(when)))
    return out


def main():
    folder = Path(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    per_second = seconds(samples(folder / "stat.raw"))
    for name, start, end in steps(folder / "steps.txt"):
        inside = [s for s in per_second if start <= s[0] <= end]
        if not inside:
            print(f"{name}: no samples")
            continue
        inside.sort(key=lambda s: -sum(b for b, _ in s[1].values()))
        chosen = inside[:top]
        cpus = sorted(chosen[0][1])
        mean = {c: tuple(sum(s[1][c][k] for s in chosen) / len(chosen) for k in (0, 1)) for c in cpus}
        total = sum(m[0] for m in mean.values()) / 100
        cells = " ".join(f"{c}:{mean[c][0]:.0f}/{mean[c][1]:.0f}" for c in cpus)
        print(f"{name} ({len(inside)} s, busiest {len(chosen)}: {total:.1f} CPUs busy) {cells}")


if __name__ == "__main__":
    main()
