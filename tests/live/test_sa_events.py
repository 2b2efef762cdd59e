"""Events an operator sees (issue 17): an SA that reaches its soft lifetime, its hard
lifetime, or the end of its sequence numbers logs one structured line, once, and counts in
`espgw_sa_events_total`."""
import re

import pytest

from conftest import ESPGW, STATE, bed_down, bed_up, metrics, nsx, sh, wait_for


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    base = sh(ESPGW, "default-config").stdout
    out_sa, in_sa = base.split("[[sa]]")[1:3]
    # Outbound: soft lifetime at 3 packets, and 10 sequence numbers left (no ESN).
    short_out = out_sa.replace("replay_window = 1024",
                               "replay_window = 1024\ninitial_seq = 4294967285\n"
                               "lifetime = { soft_packets = 3 }")
    # Inbound: hard lifetime at 5 packets.
    short_in = in_sa.replace("replay_window = 1024",
                             "replay_window = 1024\nlifetime = { hard_packets = 5 }")
    cfg = tmp_path_factory.mktemp("events") / "gw1.toml"
    cfg.write_text(base.replace(out_sa, short_out, 1).replace(in_sa, short_in, 1))
    bed_up("--io", "af-packet", "--gw1-config", str(cfg))
    yield
    bed_down()


def lines(event):
    log = (STATE / "gw1.log").read_text()
    return [l for l in log.splitlines() if f"event={event} " in l]


def test_lifetimes_and_exhaustion_are_logged_once_and_counted(short_lived):
    nsx("h1", "ping", "-c", "20", "-i", "0.05", "-W", "1", "203.0.113.2", check=False,
        timeout=30)
    assert wait_for(lambda: lines("sa_seq_exhausted") and lines("sa_hard_expired"),
                    timeout=5), (STATE / "gw1.log").read_text()[-3000:]
    soft, hard, done = lines("sa_soft_expired"), lines("sa_hard_expired"), lines("sa_seq_exhausted")
    assert len(soft) == 1 and "sa=gw1-to-gw2" in soft[0] and "spi=0x00001001" in soft[0]
    assert len(done) == 1 and "sa=gw1-to-gw2" in done[0]
    assert "last_seq=4294967295" in done[0], done[0]
    assert len(hard) == 1 and "sa=gw2-to-gw1" in hard[0] and "direction=in" in hard[0]
    assert re.search(r"level=warn", soft[0])
    m = metrics("gw1")
    for event in ("soft_expired", "hard_expired", "seq_exhausted"):
        assert m[f'espgw_sa_events_total{{event="{event}"}}'] == 1, m
