"""A backhaul sized for IPsec: with the transport network's MTU at 1600 (`testbed up
--wan-mtu 1600`), ESP around a full 1500-byte packet fits, so the gateway sends each such
packet as one ESP packet (no fragmentation before encryption, no ICMP error for DF), and
scapy decrypts it from the wire. With the default 1500 the same packets are fragmented
(tests/live/test_gateway.py)."""
import json

import pytest

from conftest import bed_down, bed_up, nsx, scapy_bg, show


@pytest.fixture(scope="module")
def backhaul_1600():
    bed_up("--io", "af-xdp", "--wan-mtu", "1600")
    yield
    bed_down()


def test_full_size_packets_cross_a_1600_byte_backhaul_whole(backhaul_1600):
    port = next(p for p in show("gw1", "ports") if p["name"] == "north")
    assert port["mtu"] == 1600, port
    stats = show("gw1", "stats")
    fragmented, mtu_drops = stats["host"]["fragmented"], stats["drops"].get("mtu", 0)
    cap = scapy_bg("wan", "esp-out-all", "3", "8")
    # 1500-byte IP packets with DF set: too big for a 1500-byte tunnel, not for this one.
    r = nsx("h1", "ping", "-M", "do", "-s", "1472", "-c", "3", "-i", "0.3", "-W", "2",
            "203.0.113.2", check=False)
    assert " 3 received" in r.stdout, r.stdout
    out, err = cap.communicate(timeout=30)
    assert cap.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])["packets"]
    # ESP header 8 + IV 8 + 1500 + pad 2 + pad length and next header 2 + ICV 16, in a
    # 20-byte outer header: 1556 bytes, whole, decrypted by scapy to the 1500-byte packet.
    assert len(got) == 3, got
    for p in got:
        assert (p["len"], p["mf"], p["frag"]) == (1556, 0, 0), p
        assert (p["inner_len"], p["inner_dst"], p["inner_df"]) == (1500, "203.0.113.2", 1), p
    stats = show("gw1", "stats")
    assert stats["host"]["fragmented"] == fragmented
    assert stats["drops"].get("mtu", 0) == mtu_drops
