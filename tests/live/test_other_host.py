"""An AF_PACKET port is promiscuous, so frames for other hosts on its link reach the
gateway's socket; they are not its to encrypt or forward (issue 17): dropped and counted
(`rx_other_host`), while the same packet to the gateway's MAC goes through."""
import pytest

from conftest import STATE, assert_confined, bed_down, bed_up, nsx, show, wait_for

GW1_SOUTH_MAC = "02:00:00:00:01:01"
OTHER_MAC = "02:00:00:00:99:99"

SEND = """
from scapy.all import Ether, IP, UDP, Raw, sendp, conf
conf.verb = 0
p = IP(src="198.51.100.2", dst="203.0.113.2") / UDP(sport=4000, dport=9) / Raw(b"x" * 40)
sendp([Ether(src="02:00:00:00:00:01", dst="{dst}") / p] * 20, iface="eth0")
"""


@pytest.fixture(scope="module")
def packet_bed():
    bed_up("--io", "af-packet")
    yield
    bed_down()


def south(gw="gw1"):
    return next(p for p in show(gw, "ports") if p["name"] == "south")


def test_frames_for_other_hosts_are_dropped_and_counted(packet_bed):
    before = show("gw1", "stats")["encrypted"]
    other = south()["rx_other_host"]
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{dst}", OTHER_MAC))
    assert wait_for(lambda: south()["rx_other_host"] >= other + 20), south()
    assert show("gw1", "stats")["encrypted"] == before, "a frame for another host was encrypted"
    # The same packets to the gateway's own MAC are encrypted (the test sends what a
    # gateway would take).
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{dst}", GW1_SOUTH_MAC))
    assert wait_for(lambda: show("gw1", "stats")["encrypted"] >= before + 20)
    # AF_PACKET, confined like AF_XDP.
    assert_confined(int((STATE / "gw1.pid").read_text()))
