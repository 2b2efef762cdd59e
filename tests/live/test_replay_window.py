"""Replay windows and several workers reading one SA.

With workers spread by flow (`--fanout hash`), one SA can reach a gateway on several
queues and in its peer's workers' interleaving, further apart than its window when one
queue's ring backs up: the gateway says so at start-up (`replay_window_shallow`, with the
depth two rings of `--ring-frames` can hold back) and the test bed's `--replay-window`
gives the built-in SAs another window. Where the advice is not due (one worker, the
ordered spread, a window deep enough) the gateway says nothing. With IKEv2 the window is
charon's `replay_window`, which reaches espgw through the kernel-espgw plugin (charon's own
default is 32; the test bed sets 1024, or --replay-window), and the gateway checks each SA
the daemon installs. The effect on traffic is checked by tests/live/test_rfc2544.py (the
windows' searches)."""
import re

import pytest

from conftest import ESPGW, STATE, bed_down, bed_up, sh, show, wait_for

ADVICE = re.compile(r"event=replay_window_shallow inbound_sas=(\d+) sa=(\S+) "
                    r"replay_window=(\d+) advised=(\d+) workers=(\d+) fanout=(\S+) source=(\S+)")


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
    """Each configuration's gateways, brought up and gateway 1 reloaded once: the SAs'
    windows as the test bed gave them, and the advice where (and as often as) it is due."""
    bed_up("--io", "af-packet", *args)
    try:
        windows = {g: inbound_windows(g) for g in ("gw1", "gw2")}
        # A reload of the same file checks the configuration again: gateway 1 says it
        # twice where the advice is due.
        r = sh(ESPGW, "reload", "--control", STATE / "gw1.sock")
        assert "reloaded" in r.stdout, r.stdout + r.stderr
    finally:
        logs = bed_down()
    for gw, log in logs.items():
        # Each gateway's one inbound SA has the window the test bed gave it.
        assert list(windows[gw].values()) == [window], (gw, windows)
        found = ADVICE.findall(log)
        if not advice:
            assert not found, (gw, log[-2000:])
            continue
        assert len(found) == (2 if gw == "gw1" else 1), (gw, log[-2000:])
        count, sa, have, advised, workers, fanout, source = found[-1]
        assert (count, have, workers, fanout) == ("1", "1024", "2", "hash"), found
        assert source == "config", found
        assert sa in windows[gw], (sa, windows)
        # Two rings of --ring-frames: 4096 by default, 2048 when the run says so.
        rings = 2048 if "--run-args=--ring-frames 2048" in args else 4096
        assert int(advised) == 2 * rings, found


@pytest.mark.parametrize("window", [None, "8192"], ids=["test-bed-default", "deep-window"])
def test_negotiated_sas_get_charons_window_and_the_same_advice(window):
    """IKEv2 keying, two workers by hash: each gateway's negotiated inbound SA has the
    window charon was given (1024 on the test bed, 8192 with --replay-window 8192), and
    only the shallower one draws the advice, naming that SA's SPI, from source ike."""
    bed_up("--keying", "ike", "--workers", "2", "--fanout", "hash",
           *(["--replay-window", window] if window else []))
    try:
        def negotiated(gw):
            return [s for s in show(gw, "sa") if s["source"] == "ike" and s["direction"] == "in"]
        sas = {g: wait_for(lambda g=g: negotiated(g), timeout=20) for g in ("gw1", "gw2")}
    finally:
        logs = bed_down()
    for gw, log in logs.items():
        assert len(sas[gw]) == 1, (gw, sas)
        sa = sas[gw][0]
        assert sa["replay_window"] == int(window or 1024), sa
        found = ADVICE.findall(log)
        if window:
            assert not found, (gw, log[-2000:])
            continue
        assert len(found) == 1, (gw, log[-2000:])
        count, spi, have, advised, workers, fanout, source = found[0]
        assert (count, have, advised, workers, fanout, source) == \
            ("1", "1024", "8192", "2", "hash", "ike"), found
        assert int(spi, 16) == int(sa["spi"], 16), (spi, sa)
