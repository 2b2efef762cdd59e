#!/usr/bin/python3
"""Writes well-formed starting inputs for the whole-path fuzz targets into seeds/<target>/:
frames built with scapy (an implementation independent of espgw) for the SAs and policies
of the fuzz configuration (src/lib.rs), so that mutation starts from packets that reach
SA lookup, the replay check, the ICV and decapsulation instead of from random bytes.

    /usr/bin/python3 fuzz/make-seeds.py      (Debian's python3-scapy; run from anywhere)

The seeds are committed; this script is how they were made (the same bytes every run: IVs
are given, not drawn). Each target's input format:
- inbound / host: one control byte (bit i: make frame i's checksums right), then frames
  separated by 0xa5;
- outbound: one control byte (bit 0: make the checksums right), then one frame;
- node: frames separated by 0xa5, each led by a byte: bit 0 the port, bit 1 make the
  checksums right, the rest how far the clock moves (x 100 ms).
A frame must not itself hold 0xa5 where frames are split on it, so the payloads here are
chosen so that no encrypted or authenticated byte is 0xa5.
"""
import os
import sys

from scapy.all import (ARP, ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest,
                       ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6, Raw, raw)
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from scapy.layers.ipsec import AH, ESP, SecurityAssociation

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = 0xA5
MAC_PEER = "02:00:00:00:00:01"
MAC_GW = "02:00:00:00:00:02"

# The fuzz configuration's keys (src/lib.rs).
GCM128 = bytes(range(16)) + bytes([1, 2, 3, 4])
GCM256 = bytes(range(16)) * 2 + bytes([1, 2, 3, 4])
CBC256 = bytes(range(16)) * 2
SHA256 = bytes.fromhex("0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201000")
SHA1 = bytes.fromhex("0102030405060708090a0b0c0d0e0f1011121314")
CHACHA_IN = bytes(range(0x20, 0x40)) + bytes([7, 0, 0, 0])
GMAC256_IN = bytes(range(0x60, 0x80)) + bytes([0x0d, 0, 0, 0])


def without_sep(make):
    """The first frame `make(i)` builds, for i = 0, 1, ..., that holds no 0xa5 byte."""
    for i in range(1000):
        f = raw(make(i))
        if SEP not in f:
            return f
    sys.exit("no frame without 0xa5 found")


def inner_udp(i, src="203.0.113.5", dst="198.51.100.5"):
    return IP(src=src, dst=dst, id=i) / UDP(sport=1000 + i, dport=53) / Raw(b"seed" * 4)


def esp_v4_tunnel(i):
    sa = SecurityAssociation(ESP, spi=0x100, crypt_algo="AES-GCM", crypt_key=GCM128,
                             tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
    # From outside 203.0.113.0/24, whose UDP the inbound policies give to SA 0x300.
    pkt = sa.encrypt(inner_udp(i, src="198.18.0.5"), seq_num=1 + i, iv=(1 + i).to_bytes(8, "big"))
    return Ether(src=MAC_PEER, dst=MAC_GW) / pkt


def esp_v6_udp_esn(i):
    sa = SecurityAssociation(ESP, spi=0x200, crypt_algo="AES-GCM", crypt_key=GCM256,
                             tunnel_header=IPv6(src="2001:db8:2::1", dst="2001:db8:2::2"),
                             nat_t_header=UDP(sport=4500, dport=4500), esn_en=True, esn=0)
    inner = IPv6(src="2001:db8:113::5", dst="2001:db8:100::5") / UDP(sport=1000 + i, dport=53)
    pkt = sa.encrypt(inner / Raw(b"seed" * 4), seq_num=1 + i, iv=(1 + i).to_bytes(8, "big"))
    # scapy 2.5 writes a UDP length of 8 under nat_t_header: recompute it (and the sum).
    del pkt[UDP].len
    del pkt[UDP].chksum
    return Ether(src=MAC_PEER, dst=MAC_GW) / IPv6(raw(pkt))


def esp_v4_tunnel_esn_chacha(i):
    sa = SecurityAssociation(ESP, spi=0x800, crypt_algo="CHACHA20-POLY1305", crypt_key=CHACHA_IN,
                             tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"), esn_en=True, esn=0)
    # From 198.19.0.0/16, whose traffic the inbound policies give to SA 0x800.
    pkt = sa.encrypt(inner_udp(i, src="198.19.0.5"), seq_num=1 + i, iv=(1 + i).to_bytes(8, "big"))
    return Ether(src=MAC_PEER, dst=MAC_GW) / pkt


def esp_v4_tunnel_esn_gmac(i):
    """ESP AES-256-GMAC with ESN (SA 0x900) as RFC 4543 builds it, through pyca (scapy 2.5
    has no ESP GMAC): the ICV is GCM's tag over SPI || high || low || IV || payload with an
    empty text (the high half 0, the SA's window at the start)."""
    seq = 1 + i
    iv = seq.to_bytes(8, "big")
    # From 198.18.128.0/17, whose traffic the inbound policies give to SA 0x900.
    payload = raw(inner_udp(i, src="198.18.128.5"))
    pad = (-(len(payload) + 2)) % 4
    text = payload + bytes(range(1, pad + 1)) + bytes([pad, 4])
    spi, hi, lo = (0x900).to_bytes(4, "big"), (seq >> 32).to_bytes(4, "big"), (seq & 0xFFFFFFFF).to_bytes(4, "big")
    icv = AESGCM(GMAC256_IN[:32]).encrypt(GMAC256_IN[32:] + iv, b"", spi + hi + lo + iv + text)
    return Ether(src=MAC_PEER, dst=MAC_GW) / IP(src="192.0.2.1", dst="192.0.2.2", proto=50) / Raw(spi + lo + iv + text + icv)


def esp_transport_cbc(i):
    sa = SecurityAssociation(ESP, spi=0x300, crypt_algo="AES-CBC", crypt_key=CBC256,
                             auth_algo="SHA2-256-128", auth_key=SHA256)
    pkt = sa.encrypt(inner_udp(i), seq_num=1 + i, iv=bytes([i]) * 16)
    return Ether(src=MAC_PEER, dst=MAC_GW) / pkt


def ah_transport_tcp(i):
    sa = SecurityAssociation(AH, spi=0x600, auth_algo="HMAC-SHA1-96", auth_key=SHA1)
    plain = IP(src="203.0.113.5", dst="198.51.100.5", id=i) / TCP(sport=1000 + i, dport=80)
    return Ether(src=MAC_PEER, dst=MAC_GW) / sa.encrypt(plain, seq_num=1 + i)


def plain_out(i, proto, dst="203.0.113.5"):
    l4 = {"udp": UDP(sport=1000 + i, dport=53), "tcp": TCP(sport=1000 + i, dport=80),
          "icmp": ICMP(id=i)}[proto]
    return Ether(src=MAC_PEER, dst=MAC_GW) / IP(src="198.51.100.5", dst=dst, id=i) / l4 / Raw(b"seed")


def plain_out_v6(i):
    return (Ether(src=MAC_PEER, dst=MAC_GW) / IPv6(src="2001:db8:100::5", dst="2001:db8:113::5")
            / UDP(sport=1000 + i, dport=53) / Raw(b"seed"))


def host_frames(i):
    return [
        Ether(src=MAC_PEER, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=MAC_PEER, psrc="198.51.100.5", pdst="198.51.100.1"),
        Ether(src=MAC_PEER, dst=MAC_GW) / IP(src="198.51.100.5", dst="198.51.100.1", id=i) / ICMP(type=8, id=i) / Raw(b"ping"),
        Ether(src=MAC_PEER, dst="33:33:ff:00:00:01") / IPv6(src="2001:db8:100::5", dst="ff02::1:ff00:1", hlim=255)
        / ICMPv6ND_NS(tgt="2001:db8:100::1") / ICMPv6NDOptSrcLLAddr(lladdr=MAC_PEER),
        Ether(src=MAC_PEER, dst=MAC_GW) / IPv6(src="2001:db8:100::5", dst="2001:db8:100::1") / ICMPv6EchoRequest(id=i),
        # TTL 1 through the gateway: time exceeded.
        Ether(src=MAC_PEER, dst=MAC_GW) / IP(src="198.51.100.5", dst="203.0.113.5", ttl=1, id=i) / UDP() / Raw(b"ttl"),
        # A first fragment.
        Ether(src=MAC_PEER, dst=MAC_GW) / IP(src="192.0.2.1", dst="192.0.2.2", flags="MF", proto=50, id=i) / Raw(b"\x00\x00\x01\x00" + b"frag" * 4),
    ]


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def joined(frames, lead=b""):
    return lead + bytes([SEP]).join(frames)


def main():
    esp = {
        "esp-v4-tunnel-gcm": lambda i: esp_v4_tunnel(i),
        "esp-v6-udp-esn-gcm": lambda i: esp_v6_udp_esn(i),
        "esp-transport-cbc-sha256": lambda i: esp_transport_cbc(i),
        "esp-v4-tunnel-esn-chacha": lambda i: esp_v4_tunnel_esn_chacha(i),
        "esp-v4-tunnel-esn-gmac": lambda i: esp_v4_tunnel_esn_gmac(i),
        "ah-transport-sha1": lambda i: ah_transport_tcp(i),
    }
    for name, make in esp.items():
        frames = [without_sep(lambda j, k=k: make(10 * k + j)) for k in range(3)]
        # Three in a row (checksums kept as built: control byte 0), the same with bit 0..2.
        write("inbound", name, joined(frames, b"\x00"))
        write("inbound", name + "-fixed", joined(frames, b"\x07"))
    outs = {
        "udp-transport-gcm": lambda i: plain_out(i, "udp"),
        "tcp-ah": lambda i: plain_out(i, "tcp"),
        "icmp-bundle": lambda i: plain_out(i, "icmp"),
        "v6-tunnel-udp": plain_out_v6,
        # To 198.19.0.0/16: the IPv4 tunnel with ChaCha20-Poly1305 (SA 0x800).
        "udp-tunnel-chacha": lambda i: plain_out(i, "udp", dst="198.19.0.5"),
    }
    for name, make in outs.items():
        write("outbound", name, b"\x00" + raw(make(1)))
    hosts = [without_sep(lambda j, k=k: host_frames(j)[k]) for k in range(len(host_frames(0)))]
    write("host", "arp-ping-nd-ttl-fragment", joined(hosts, b"\x00"))
    # The node: south (port 0) frames, then north (port 1) ESP, the clock moving 100 ms.
    south = [without_sep(lambda j: plain_out(j, "udp")), hosts[0], hosts[1]]
    north = [without_sep(lambda j: esp_v4_tunnel(j)), without_sep(lambda j: ah_transport_tcp(j)),
             without_sep(lambda j: esp_v4_tunnel_esn_chacha(j))]
    node = [bytes([0b100]) + f for f in south] + [bytes([0b101]) + f for f in north]
    write("node", "south-then-north", joined(node))
    print("seeds written under", os.path.join(HERE, "seeds"))


if __name__ == "__main__":
    main()
