"""A port is on an untagged network. A frame tagged for a VLAN belongs to that VLAN's
network (a VLAN sub-interface's, another tenant's on a trunk), and reached the gateway all
the same: an AF_PACKET socket bound to an interface sees the frames of every VLAN above it
(the kernel hands them to the interface's taps first, the tag in the slot's header), and
the XDP program saw every frame the interface receives, tag and all. Before the ports told
them apart, the 20 frames below tagged VLAN 42 were all encrypted and sent to the peer, on
both back-ends (20 of 20, measured 2026-12-03). Now an AF_PACKET port drops and counts them
(`rx_vlan_tagged`; the kernel still gives them to a VLAN sub-interface), and an AF_XDP
port's program hands them to the kernel instead of the socket (where a sub-interface would
get them; tshark on the interface, which sees only what the kernel got, is the witness); an
802.1ad (QinQ) frame too. A priority-tagged frame (VLAN ID 0: only a priority, the untagged
network's, as Linux takes it) and the untagged frame go through. scapy builds the frames."""
import pytest

from conftest import (STATE, assert_confined, bed_down, bed_up, metrics, nsx, sh, show,
                      start_capture, wait_for)

SEND = """
from scapy.all import Ether, Dot1Q, Dot1AD, IP, UDP, Raw, sendp, conf
conf.verb = 0
p = IP(src="198.51.100.2", dst="203.0.113.2") / UDP(sport=4000, dport=9) / Raw(b"x" * 40)
sendp([Ether(src="02:00:00:00:00:01", dst="02:00:00:00:01:01") / {tagged}p] * 20, iface="eth0")
"""


@pytest.fixture(scope="module", params=["af-packet", "af-xdp"])
def port_bed(request):
    bed_up("--io", request.param)
    yield request.param
    logs = bed_down()
    if request.param == "af-xdp":
        # The log says what the gateway changed on the interface.
        for feature in ("rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"):
            line = f"event=af_xdp_rx_vlan_offload_off interface=south feature={feature}"
            assert line in logs["gw1"], logs["gw1"][-2000:]


def south():
    return next(p for p in show("gw1", "ports") if p["name"] == "south")


def send(tag):
    """Sends the 20 frames with `tag` (scapy layers between Ethernet and IP; "": none);
    returns how many gw1 encrypted and how many its south port counted as tagged."""
    encrypted, tagged = show("gw1", "stats")["encrypted"], south()["rx_vlan_tagged"]
    nsx("h1", "/usr/bin/python3", "-c", SEND.replace("{tagged}", f"{tag} / " if tag else ""))
    wait_for(lambda: show("gw1", "stats")["encrypted"] >= encrypted + 20
             or south()["rx_vlan_tagged"] >= tagged + 20, timeout=2)
    return (show("gw1", "stats")["encrypted"] - encrypted, south()["rx_vlan_tagged"] - tagged)


@pytest.mark.parametrize("tag", ["Dot1Q(vlan=42)", "Dot1Q(vlan=4094, prio=3)",
                                 "Dot1AD(vlan=7) / Dot1Q(vlan=42)"])
def test_frames_tagged_for_a_vlan_are_not_the_ports(port_bed, tag, tmp_path):
    cap = tmp_path / "south.pcap"
    tshark = start_capture("espgw-gw1", "south", cap, 4, bpf="vlan")
    encrypted, counted = send(tag)
    tshark.wait(timeout=30)
    seen_by_kernel = len(sh("tshark", "-r", cap, "-Y", "udp.dstport == 9",
                            "-T", "fields", "-e", "frame.number").stdout.split())
    assert encrypted == 0
    if port_bed == "af-packet":
        # The port's socket is a tap beside the kernel's path: both see the frames.
        assert (counted, seen_by_kernel) == (20, 20)
        m = metrics("gw1")
        key = 'espgw_port_rx_vlan_tagged_total{port="south",interface="south"}'
        assert m[key] == south()["rx_vlan_tagged"], m.get(key)
    else:
        # The XDP program passed them to the kernel: the socket never had them.
        assert (counted, seen_by_kernel) == (0, 20)


@pytest.mark.parametrize("tag", ["Dot1Q(vlan=0, prio=5)", ""])
def test_priority_tagged_and_untagged_frames_go_through(port_bed, tag):
    assert send(tag) == (20, 0)


def test_an_af_xdp_port_keeps_tags_in_frames(port_bed):
    """A NIC's receive VLAN offloads take the tag out of the frame before an XDP program
    sees it: the gateway turns them off on its AF_XDP interfaces, for 802.1Q and 802.1ad
    tags (veth has both on by default). AF_PACKET reads the tag the kernel took out, and
    leaves the settings alone."""
    features = nsx("gw1", "ethtool", "-k", "south").stdout
    want = "off" if port_bed == "af-xdp" else "on"
    assert f"rx-vlan-offload: {want}\n" in features, features
    assert f"rx-vlan-stag-hw-parse: {want}\n" in features, features
    assert_confined(int((STATE / "gw1.pid").read_text()))
