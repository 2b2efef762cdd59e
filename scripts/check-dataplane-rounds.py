#!/usr/bin/env python3
"""Checks `espgw-lab bench dataplane --rounds R` on one core (run by scripts/test.sh).

    python3 scripts/check-dataplane-rounds.py path/to/espgw-lab

Runs two suites (ESP and AH) for three short rounds with the raw references and checks the
JSON against its own per-round figures, recomputed here: every row has R rounds of the
pipeline's rate and of the raw reference; the reported ratio is the median of the rounds'
own ratios (each round's pipeline over the same round's reference), not the ratio of the
medians; the range holds the median; the rates are the rounds' medians; nothing was
dropped. Then `scripts/suite-ratios.py` reads the run and counts its rows.
"""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROUNDS = 3
SUITES = ["null+aes-xcbc-mac-96", "ah/hmac-sha1-96"]


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check_row(row):
    name = f"{row['algorithm']} {row['frame_size']} {row['direction']}"
    assert row["rounds"] == ROUNDS, name
    mpps, raw = row["round_mpps"], row["round_raw_suite_mops"]
    assert len(mpps) == ROUNDS and len(raw) == ROUNDS, name
    assert all(m > 0 for m in mpps) and all(r > 0 for r in raw), name
    paired = [m / r for m, r in zip(mpps, raw)]
    assert close(row["ratio_to_raw_suite"], statistics.median(paired)), (name, row, paired)
    assert close(row["ratio_to_raw_suite_low"], min(paired)), name
    assert close(row["ratio_to_raw_suite_high"], max(paired)), name
    assert close(row["mpps"], statistics.median(mpps)), name
    assert close(row["raw_suite_mops"], statistics.median(raw)), name
    assert row["dropped"] == 0, name


def main(lab):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rounds.json"
        printed = subprocess.run(
            [lab, "bench", "dataplane", "--sizes", "64", "--seconds", "0.05",
             "--rounds", str(ROUNDS), "--algs", ",".join(SUITES), "--json", str(out)],
            check=True, capture_output=True, text=True).stdout
        rows = json.loads(out.read_text())["results"]
        assert len(rows) == 2 * len(SUITES), rows
        for row in rows:
            check_row(row)
        # The printed table gives the rounds' range of each row.
        assert printed.count(f"in {ROUNDS} rounds)") == len(rows), printed
        counted = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("suite-ratios.py")), str(out)],
            check=True, capture_output=True, text=True).stdout
        assert f"of {len(rows)} rows meet the target" in counted, counted
    print(f"bench dataplane --rounds {ROUNDS}: {len(rows)} rows, each ratio the median of its "
          f"rounds' own ratios")


if __name__ == "__main__":
    main(sys.argv[1])
