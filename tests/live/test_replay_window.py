"""Replay windows and several workers reading one SA.

With workers spread by flow (`--fanout hash`), one SA can reach a gateway on several
queues and in its peer's workers' interleaving, further apart than its window when one
queue's ring backs up: the gateway says so at start-up (`replay_window_shallow`, with the
depth two rings of `--ring-frames` can hold back) and the test bed's `--replay-window`
gives the built-in SAs another window. Where the advice is not due (one worker, the
ordered spread, a window deep enough) the gateway says nothing. The effect on traffic is
checked by tests/live/test_rfc2544.py (the windows' searches)."""
import re

import pytest

from conftest import bed_down, bed_up, show

ADVICE = re.compile(r"event=replay_window_shallow inbound_sas=(\d+) sa=(\S+) "
                    r"replay_window=(\d+) advised=(\d+) workers=(\d+) fanout=(\S+)")


def inbound_windows(gw):
    return {s["name"]: s["replay_window"] for s in show(gw, "sa") if s["direction"] == "in"}


@pytest.mark.parametrize("args,advice,window", [
    (("--workers", "2", "--fanout", "hash"), True, 1024),
    (("--workers", "2", "--fanout", "hash", "--run-args=--ring-frames 2048"), True, 1024),
    (("--workers", "2", "--fanout", "hash", "--replay-window", "8192"), False, 8192),
    (("--workers", "2", "--fanout", "ordered"), False, 1024),
    (("--workers", "1", "--fanout", "hash"), False, 1024),
    (("--workers", "2", "--fanout", "hash", "--replay-window", "0"), False, 0),
], ids=["hash", "hash-small-rings", "hash-deep-window", "ordered", "one-worker",
        "anti-replay-off"])
def test_the_gateway_advises_a_window_as_deep_as_its_rings(args, advice, window):
    bed_up("--io", "af-packet", *args)
    try:
        windows = {g: inbound_windows(g) for g in ("gw1", "gw2")}
    finally:
        logs = bed_down()
    for gw, log in logs.items():
        # Each gateway's one inbound SA has the window the test bed gave it.
        assert list(windows[gw].values()) == [window], (gw, windows)
        found = ADVICE.findall(log)
        if not advice:
            assert not found, (gw, log[-2000:])
            continue
        assert len(found) == 1, (gw, log[-2000:])
        count, sa, have, advised, workers, fanout = found[0]
        assert (count, have, workers, fanout) == ("1", "1024", "2", "hash"), found
        assert sa in windows[gw], (sa, windows)
        # Two rings of --ring-frames: 4096 by default, 2048 when the run says so.
        rings = 2048 if "--run-args=--ring-frames 2048" in args else 4096
        assert int(advised) == 2 * rings, found
