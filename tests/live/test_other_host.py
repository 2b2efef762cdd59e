"""An AF_PACKET port is promiscuous, so frames for other hosts on its link reach the
gateway's socket; they are not its to encrypt or forward (issue 17): dropped and counted
(`rx_other_host`), while the same packet to the gateway's MAC goes through."""
import time

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


HOST_SENDS = """
from scapy.all import Ether, IP, UDP, Raw, sendp, conf
conf.verb = 0
p = IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=40000, dport=9) / Raw(b"x" * 20)
sendp(Ether(src="02:00:00:00:01:02", dst="02:00:00:00:02:02") / p, iface="north", count=10)
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_frames_the_host_sends_on_a_port_are_not_input(workers):
    """A frame that something else in the gateway's namespace sends out of a port is no
    frame the gateway received. One socket skips them (PACKET_IGNORE_OUTGOING); with two
    workers the sockets are a fanout group, which that option does not cover: before the
    group's own flag (PACKET_FANOUT_FLAG_IGNORE_OUTGOING), 10 frames sent this way entered
    gateway 1's pipeline 200 times (dropped as `no_policy`)."""
    bed_up("--io", "af-packet", "--workers", workers, "--fanout", "hash")
    try:
        def north_rx():
            return next(p for p in show("gw1", "ports") if p["name"] == "north")["rx_packets"]
        time.sleep(1)  # the link's own start-up frames (ARP, ND) in first
        before, pipeline = north_rx(), show("gw1", "stats")["rx_packets"]
        nsx("gw1", "/usr/bin/python3", "-c", HOST_SENDS)
        time.sleep(0.5)  # the workers publish their counters every 50 ms
        # At most a stray frame of the link's own (an ARP), not the ten (or 200).
        assert north_rx() - before <= 2, (before, north_rx())
        stats = show("gw1", "stats")
        assert stats["rx_packets"] - pipeline <= 2 and "no_policy" not in stats["drops"], stats
    finally:
        bed_down()
