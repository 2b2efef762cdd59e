"""Frames for other hosts on a port's link reach the gateway's socket: an AF_PACKET port is
promiscuous, and an AF_XDP port's XDP program sees every frame the interface receives, before
the kernel's own MAC filter (a veth, a bridge port, a NIC in promiscuous mode). They are not
the gateway's to encrypt or forward (issue 17): dropped and counted (`rx_other_host`), while
the same packet to the gateway's MAC goes through. Before the AF_XDP port compared the
destination MAC, the 20 frames below addressed to another host were all encrypted."""
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


@pytest.fixture(scope="module", params=["af-packet", "af-xdp"])
def port_bed(request):
    bed_up("--io", request.param)
    yield request.param
    bed_down()


def south(gw="gw1"):
    return next(p for p in show(gw, "ports") if p["name"] == "south")


def test_frames_for_other_hosts_are_dropped_and_counted(port_bed):
    before = show("gw1", "stats")["encrypted"]
    other = south()["rx_other_host"]
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{dst}", OTHER_MAC))
    assert wait_for(lambda: south()["rx_other_host"] >= other + 20), south()
    assert show("gw1", "stats")["encrypted"] == before, "a frame for another host was encrypted"
    # The same packets to the gateway's own MAC are encrypted (the test sends what a
    # gateway would take).
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{dst}", GW1_SOUTH_MAC))
    assert wait_for(lambda: show("gw1", "stats")["encrypted"] >= before + 20)
    # Broadcast is every host's: broadcast frames reach the gateway (received, whatever the
    # host stage then makes of them) and are not counted as another host's.
    other, received = south()["rx_other_host"], south()["rx_packets"]
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{dst}", "ff:ff:ff:ff:ff:ff"))
    assert wait_for(lambda: south()["rx_packets"] >= received + 20), south()
    assert south()["rx_other_host"] == other
    # Either back-end, the gateway is confined.
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
