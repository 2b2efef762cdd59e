"""Packet shapes beyond the plain ones, against scapy: IPv4 options and IPv6 extension
headers in transport mode (where ESP goes in the middle of the header chain), 802.1Q-tagged
input frames, and raw-IP captures (link type 101)."""
import subprocess

from scapy.all import (IP, UDP, Dot1Q, Ether, IPOption_RR, IPv6, IPv6ExtHdrDestOpt,
                       IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, PadN, Raw, raw, rdpcap, wrpcap)
from scapy.layers.ipsec import ESP, SecurityAssociation

from helpers import Gateway, Sa, ether, fresh_state, run_pcap

KEY = bytes(range(32, 48)) + b"\xab\xcd\xef\x01"


def transport_gw(direction, src, dst, spi):
    sa = Sa(spi=spi, direction=direction, key=KEY, mode="transport")
    return sa, Gateway(sas=[sa], policies=[(direction, src, dst, spi)])


def test_ipv4_options_stay_in_front_of_esp(espgw, tmp_path):
    sa, gw = transport_gw("out", "198.51.100.10/32", "203.0.113.20/32", 0x3001)
    cfg = gw.write(tmp_path / "gw.toml", "native")
    orig = IP(src="198.51.100.10", dst="203.0.113.20", options=[IPOption_RR(routers=["192.0.2.9"])]) \
        / UDP(sport=5, dport=6) / Raw(b"options" * 5)
    orig = IP(raw(orig))
    assert orig.ihl > 5
    out, c = run_pcap(espgw, cfg, "outbound", [ether(orig)], tmp_path)
    assert c["encrypted"] == 1
    ip = out[0][IP]
    assert ip.ihl == orig.ihl and ip.options == orig.options and ip.proto == 50
    peer = SecurityAssociation(ESP, spi=0x3001, crypt_algo="AES-GCM", crypt_key=KEY)
    assert raw(peer.decrypt(ip)) == raw(orig)


def test_ipv6_extension_headers_in_transport_mode(espgw, tmp_path):
    """Hop-by-hop and routing headers stay in front of ESP (RFC 4303 §3.1.1); the trailing
    destination options header is protected. Both directions against scapy."""
    a, b = "2001:db8:100::10", "2001:db8:113::20"
    orig = (IPv6(src=a, dst=b) / IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0\0\0\0")])
            / IPv6ExtHdrRouting(addresses=[], segleft=0)
            / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0\0\0\0")]) / UDP(sport=7, dport=8) / Raw(b"ext" * 9))
    orig = IPv6(raw(orig))
    # espgw encrypts, scapy decrypts.
    sa, gw = transport_gw("out", a + "/128", b + "/128", 0x3002)
    cfg = gw.write(tmp_path / "out.toml", "native")
    out, c = run_pcap(espgw, cfg, "outbound", [ether(orig)], tmp_path)
    assert c["encrypted"] == 1
    ip = out[0][IPv6]
    assert IPv6ExtHdrHopByHop in ip and IPv6ExtHdrRouting in ip
    assert ip[IPv6ExtHdrRouting].nh == 50, "ESP follows the routing header"
    assert IPv6ExtHdrDestOpt not in ip, "the destination options are encrypted"
    peer = SecurityAssociation(ESP, spi=0x3002, crypt_algo="AES-GCM", crypt_key=KEY)
    assert raw(peer.decrypt(ip)) == raw(orig)
    # scapy encrypts, espgw decrypts.
    sa_in, gw_in = transport_gw("in", a + "/128", b + "/128", 0x3003)
    cfg_in = gw_in.write(tmp_path / "in.toml", "native")
    peer = SecurityAssociation(ESP, spi=0x3003, crypt_algo="AES-GCM", crypt_key=KEY)
    back, c = run_pcap(espgw, cfg_in, "inbound", [ether(peer.encrypt(orig))], tmp_path)
    assert c["decrypted"] == 1
    assert raw(back[0][IPv6]) == raw(orig)


def test_vlan_tagged_input(espgw, tmp_path):
    sa = Sa(spi=0x3004, direction="out", key=KEY, mode="ipv4-tunnel")
    gw = Gateway(sas=[sa], policies=[("out", "198.51.100.0/24", "203.0.113.0/24", sa.spi)])
    cfg = gw.write(tmp_path / "gw.toml", "native")
    orig = IP(src="198.51.100.1", dst="203.0.113.1") / UDP() / Raw(b"vlan")
    frame = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:01:01") / Dot1Q(vlan=42) / orig
    out, c = run_pcap(espgw, cfg, "outbound", [frame], tmp_path)
    assert c["encrypted"] == 1
    peer = SecurityAssociation(ESP, spi=0x3004, crypt_algo="AES-GCM", crypt_key=KEY,
                               tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
    assert raw(peer.decrypt(out[0][IP])) == raw(IP(raw(orig)))


def test_raw_ip_captures_keep_their_link_type(espgw, tmp_path):
    sa = Sa(spi=0x3005, direction="out", key=KEY, mode="ipv6-tunnel")
    gw = Gateway(sas=[sa], policies=[("out", "198.51.100.0/24", "203.0.113.0/24", sa.spi)])
    cfg = gw.write(tmp_path / "gw.toml", "native")
    orig = IP(src="198.51.100.1", dst="203.0.113.1") / UDP() / Raw(b"raw")
    inp, out = tmp_path / "raw.pcap", tmp_path / "out.pcap"
    wrpcap(str(inp), [orig], linktype=101)
    subprocess.run([str(espgw), "pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound",
                    "--input", str(inp), "--output", str(out)], check=True, capture_output=True)
    assert int.from_bytes(out.read_bytes()[20:24], "little") == 101
    pkts = rdpcap(str(out))
    outer = IPv6(raw(pkts[0]))
    assert outer.nh == 50 and outer.src == "2001:db8:2::1"
    peer = SecurityAssociation(ESP, spi=0x3005, crypt_algo="AES-GCM", crypt_key=KEY,
                               tunnel_header=IPv6(src="2001:db8:2::1", dst="2001:db8:2::2"))
    assert raw(peer.decrypt(outer)) == raw(IP(raw(orig)))
