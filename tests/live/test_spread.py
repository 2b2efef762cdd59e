"""The ordered spread engages workers as the load needs them (`--fanout ordered`, the
default `--ordered-join busy`): under light traffic worker 0 reads alone and the other
worker reads nothing; under a flood the sockets back up and the backlog is judged: worker 1
is called in if worker 0 had its core to itself, and not if it was short of CPU (on this
2-core machine the senders, the peer and the kernel share its core, so either may happen;
the unit tests in spread.rs drive both outcomes). Whichever it was, one SA leaves in order
(sequence numbers strictly increasing on the wire, no flow reordered, no replay drop at the
peer), worker 1 reads only after a join, and once the flood is over worker 0 is alone again.
Two workers reading from the start (`--ordered-join always`) are test_workers.py's."""
import json
import time

import pytest

from conftest import (LAB, STATE, bed_down, bed_up, metrics, nsx, nspopen, sh, listening, show,
                      start_capture, wait_for)


@pytest.fixture(scope="module")
def busy_join():
    # Pinned, as in test_workers.py: a worker moved between cores would hand its frames
    # to the other core's backlog, and the kernel would reorder them. No --fanout: with two
    # workers the gateway's default is the ordered spread, joining when busy.
    # Burst pacing on (not the default), so that the flood below also proves the order
    # with a worker's bursts sized by its speed.
    bed_up("--io", "af-packet", "--workers", "2", "--run-args=--pin --burst-pacing on")
    log = (STATE / "gw1.log").read_text()
    assert ("event=spread workers=2 fanout=ordered ordered_join=busy burst_pacing=on"
            in log), log[-2000:]
    yield
    bed_down()


def spread(gw):
    return show(gw, "stats")["ordered_spread"]


def send(flows, port, rate, seconds, size):
    """UDP flows h1 -> h2 (ports port..port+flows-1); returns each receiver's report."""
    rx = [listening(nspopen("h2", LAB, "testbed", "udp-recv", "--port", port + i,
                            "--seconds", seconds + 4)) for i in range(flows)]
    tx = [nspopen("h1", LAB, "testbed", "udp-send", "--dst", f"203.0.113.2:{port + i}",
                  "--size", size, "--seconds", seconds, "--rate", rate) for i in range(flows)]
    for p in tx:
        p.communicate(timeout=60)
    return [json.loads(p.communicate(timeout=60)[0]) for p in rx]


def test_light_traffic_is_read_by_worker_zero_alone(busy_join):
    s = spread("gw1")
    assert (s["join"], s["engaged"], s["joined"]) == ("busy", 1, 0), s
    nsx("h1", "ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.2")
    # 4 flows at 500 packets/s each: a burst of 64 comes back full only if worker 0
    # stopped reading for over 30 ms, four times in a row.
    received = send(4, 9300, 500, 2, 100)
    assert sum(r["packets"] for r in received) > 0.9 * 4 * 1000, received
    per_worker = show("gw1", "stats")["per_worker_rx"]
    assert per_worker[0] > 3600 and per_worker[1] == 0, per_worker
    assert spread("gw1")["joined"] == 0, spread("gw1")


def test_a_flood_calls_worker_one_in_and_keeps_the_order(busy_join, tmp_path):
    before = show("gw1", "stats")["per_worker_rx"]
    cap = tmp_path / "wan.pcap"
    dump = start_capture("espgw-wan", "br0", cap, 5, bpf="esp and src 192.0.2.1")
    # As fast as four senders go, for 1.5 s: more than one worker of gw1 takes on this
    # machine (1-worker zero-loss rate at 64 bytes: 106,000-172,000 frames/s).
    received = send(4, 9400, 0, 1.5, 18)
    dump.wait(timeout=30)
    s = spread("gw1")
    # The backlog was seen and judged: a worker called in, or held back for want of CPU.
    assert s["joined"] + s["not_joined_short_of_cpu"] >= 1, s
    # What the workers waited for their bursts' turns, in the stats and the metrics alike.
    m = metrics("gw1")
    waited = [m[f'espgw_ordered_wait_seconds_total{{section="{x}"}}']
              for x in ("pipeline", "transmit")]
    assert set(s["waited_ms"]) == {"pipeline", "transmit"}, s
    assert all(w >= 0 for w in waited), waited
    # Two workers took one SA's bursts: a later ticket waited for an earlier one's turn.
    assert s["joined"] == 0 or sum(waited) > 0, (s, waited)
    after = show("gw1", "stats")["per_worker_rx"]
    # Worker 1 read only if it was called in.
    assert s["joined"] >= 1 or after[1] == before[1], (s, before, after)
    # One SA over both workers, in arrival order: strictly increasing on the wire.
    r = sh("tshark", "-r", cap, "-Y", "esp.spi == 0x00001001", "-T", "fields",
           "-e", "esp.sequence", timeout=300)
    seqs = [int(x) for x in r.stdout.split()]
    assert len(seqs) > 10_000, len(seqs)
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(seqs, seqs[1:])) if a >= b]
    assert not bad, f"{len(bad)} of {len(seqs)} out of order on the wire: {bad[:5]}"
    # Each flow arrives in order (losses under the flood are allowed; reordering is not).
    assert sum(r["reordered"] for r in received) == 0, received
    assert show("gw2", "stats")["drops"].get("replay", 0) == 0, show("gw2", "stats")["drops"]
    # The flood over, worker 0 is alone again (a worker called in steps back after 100 ms
    # without a full burst).
    back = wait_for(lambda: (lambda s: s if s["engaged"] == 1 else None)(spread("gw1")),
                    timeout=5)
    assert back and back["stepped_back"] == back["joined"], spread("gw1")
    # Burst pacing: each worker's burst size within its bounds, a full burst (64) down to
    # an eighth of one.
    limits = spread("gw1")["burst_limits"]
    assert len(limits) == 2 and all(8 <= x <= 64 for x in limits), limits


def test_always_engages_every_worker_from_the_start(tmp_path):
    # Worth a test bed of its own only briefly: the stats say it before any traffic.
    bed_down()
    try:
        bed_up("--io", "af-packet", "--workers", "2", "--fanout", "ordered",
               "--run-args=--pin --ordered-join always")
        log = (STATE / "gw1.log").read_text()
        assert "ordered_join=always burst_pacing=off" in log, log[-2000:]
        time.sleep(0.2)  # past the workers' first report (every 50 ms)
        s = spread("gw1")
        assert (s["join"], s["engaged"]) == ("always", 2), s
        # Without pacing (the default) no worker sizes its bursts: every burst a full one.
        assert s["burst_limits"] == [None, None], s
        m = metrics("gw1")
        assert m["espgw_ordered_spread_workers"] == 2, m
        assert m['espgw_ordered_spread_changes_total{change="joined"}'] == 0, m
    finally:
        bed_down()
