"""Interop with scapy's independent ESP implementation (Debian python3-scapy 2.5).

espgw encrypts and scapy decrypts; scapy encrypts and espgw decrypts. For AES-GCM-128,
-192 and -256; tunnel IPv4-in-IPv4, IPv6-in-IPv6, IPv4-in-IPv6 and transport mode (IPv4
and IPv6); with and without ESN; with and without UDP encapsulation; with configurations
in the native format, DPDK ipsec-secgw syntax and setkey scripts.
"""
import itertools

import pytest
from scapy.all import ICMP, IP, TCP, UDP, IPv6, ICMPv6EchoRequest, Raw, raw
from scapy.layers.ipsec import ESP, SecurityAssociation

from helpers import OUTER, Gateway, Sa, ether, l3, run_pcap

KEYS = {
    128: bytes(range(16)) + bytes.fromhex("cafe0001"),
    192: bytes(range(100, 124)) + bytes.fromhex("cafe0002"),
    256: bytes(range(200, 232)) + bytes.fromhex("cafe0003"),
}
# shape -> (espgw mode, inner family)
SHAPES = {
    "v4-in-v4": ("ipv4-tunnel", 4),
    "v6-in-v6": ("ipv6-tunnel", 6),
    "v4-in-v6": ("ipv6-tunnel", 4),
    "transport-v4": ("transport", 4),
    "transport-v6": ("transport", 6),
}
HOSTS = {4: ("198.51.100.10", "203.0.113.20"), 6: ("2001:db8:100::10", "2001:db8:113::20")}
NETS = {4: ("198.51.100.0/24", "203.0.113.0/24"), 6: ("2001:db8:100::/64", "2001:db8:113::/64")}
# With ESN the first sequence number lies past 2^32, so the high half is 1.
ESN_START = (1 << 32) + 40


def inner_packets(fam, src, dst):
    """UDP, TCP and ICMP packets of several sizes, empty payload included."""
    ip = (lambda: IP(src=src, dst=dst, ttl=61, tos=0x28)) if fam == 4 else (
        lambda: IPv6(src=src, dst=dst, hlim=61, tc=0x28, fl=0x1234))
    pkts = []
    for i, size in enumerate([0, 1, 17, 100, 511, 1300]):
        payload = Raw(bytes((i + j) & 0xff for j in range(size)))
        l4 = [UDP(sport=1000 + i, dport=53), TCP(sport=2000 + i, dport=80, flags="PA", seq=i),
              ICMP(id=i, seq=i) if fam == 4 else ICMPv6EchoRequest(id=i, seq=i)][i % 3]
        pkts.append(ip() / l4 / payload)
    # Let scapy fill lengths and checksums once, so comparisons are byte for byte.
    return [p.__class__(raw(p)) for p in pkts]


def selectors(fam, mode, direction):
    """Policy (src, dst) for traffic south -> north (out) or north -> south (in)."""
    if mode == "transport":
        a, b = HOSTS[fam]
        a, b = (a + ("/32" if fam == 4 else "/128")), (b + ("/32" if fam == 4 else "/128"))
    else:
        a, b = NETS[fam]
    return (a, b) if direction == "out" else (b, a)


def scapy_sa(sa, scapy_sends):
    """scapy's SA matching espgw's `sa`; scapy is the peer gateway."""
    local, remote = sa.endpoints() if sa.mode != "transport" else (None, None)
    tunnel = None
    if sa.mode != "transport":
        # Packets scapy sends go peer -> espgw; packets it reads come espgw -> peer.
        src, dst = (remote, local) if scapy_sends else (local, remote)
        tunnel = IP(src=src, dst=dst) if ":" not in src else IPv6(src=src, dst=dst)
    s = SecurityAssociation(
        ESP, spi=sa.spi, crypt_algo="AES-GCM", crypt_key=sa.key, tunnel_header=tunnel,
        nat_t_header=UDP(sport=4500, dport=4500) if sa.udp else None,
        esn_en=sa.esn, esn=(ESN_START >> 32) if sa.esn else 0)
    return s


def nat_t_fix(pkt):
    """scapy 2.5 quirk: with nat_t_header its UDP length field covers the UDP header only
    (8), so the datagram it builds is malformed (Linux trims it to nothing, and so does
    espgw). Recompute the length and checksum of such datagrams."""
    if UDP in pkt and pkt[UDP].dport == 4500:
        del pkt[UDP].len
        del pkt[UDP].chksum
        return pkt.__class__(raw(pkt))
    return pkt


def cases():
    out = []
    for bits, shape, esn, udp in itertools.product(KEYS, SHAPES, [False, True], [False, True]):
        out.append(("native", bits, shape, esn, udp))
    # The other two formats over every shape, with and without UDP encapsulation.
    for shape, udp in itertools.product(SHAPES, [False, True]):
        out.append(("secgw", 128, shape, True, udp))
        out.append(("secgw", 256, shape, False, udp))
        out.append(("setkey", 128, shape, False, udp))
        out.append(("setkey", 192, shape, False, udp))
    return out


def ids(c):
    fmt, bits, shape, esn, udp = c
    return f"{fmt}-aes{bits}-{shape}{'-esn' if esn else ''}{'-udp' if udp else ''}"


def gateway_for(case, direction, spi, tmp_path):
    """espgw's side of a case: one SA in `direction` and its policy, written in the case's
    format. With ESN both ends start past 2^32 (the window is placed there inbound)."""
    fmt, bits, shape, esn, udp = case
    mode, fam = SHAPES[shape]
    sa = Sa(spi=spi, direction=direction, key=KEYS[bits], mode=mode, esn=esn,
            initial_seq=ESN_START - 1 if esn else 0, udp=udp)
    src, dst = selectors(fam, mode, direction)
    gw = Gateway(sas=[sa], policies=[(direction, src, dst, sa.spi)])
    return sa, gw.write(tmp_path / f"gw.{fmt}", fmt), mode, fam, udp


@pytest.mark.parametrize("case", cases(), ids=ids)
def test_espgw_encrypts_scapy_decrypts(espgw, tmp_path, case):
    sa, cfg, mode, fam, udp = gateway_for(case, "out", 0x1001, tmp_path)
    plain = inner_packets(fam, *HOSTS[fam])
    out, counters = run_pcap(espgw, cfg, "outbound", [ether(p) for p in plain], tmp_path)
    assert counters["encrypted"] == len(plain), counters
    assert len(out) == len(plain)
    peer = scapy_sa(sa, scapy_sends=False)
    for i, (frame, orig) in enumerate(zip(out, plain)):
        outer = frame[IP] if IP in frame else frame[IPv6]
        if udp:
            assert UDP in frame and frame[UDP].dport == 4500 and frame[UDP].sport == 4500
        esp = ESP(raw(frame[UDP].payload)) if udp else frame[ESP]
        assert esp.spi == sa.spi
        assert esp.seq == ((sa.initial_seq + 1 + i) & 0xffffffff)
        if mode != "transport":
            assert outer.src == sa.endpoints()[0] and outer.dst == sa.endpoints()[1]
        clear = raw(peer.decrypt(outer))
        if mode == "transport" and fam == 6 and udp:
            # scapy 2.5 quirk (SecurityAssociation._decrypt_esp): for IPv6 transport mode
            # with NAT-T it leaves the 8-byte UDP header in the packet and counts it in the
            # payload length. The upper layer must still be byte for byte ours.
            o = raw(orig)
            assert clear[8:40] == o[8:40], "addresses"
            assert len(clear) == len(o) + 8
            assert clear[48:] == o[40:], f"packet {i}"
        else:
            assert clear == raw(orig), f"packet {i}"


@pytest.mark.parametrize("case", cases(), ids=ids)
def test_scapy_encrypts_espgw_decrypts(espgw, tmp_path, case):
    sa, cfg, mode, fam, udp = gateway_for(case, "in", 0x2001, tmp_path)
    esn = sa.esn
    a, b = HOSTS[fam]
    plain = inner_packets(fam, b, a)
    peer = scapy_sa(sa, scapy_sends=True)
    # scapy treats seq_num=0 as unset: set the counter on the SA instead.
    peer.seq_num = (ESN_START & 0xffffffff) if esn else 1
    frames = [ether(nat_t_fix(peer.encrypt(p))) for p in plain]
    out, counters = run_pcap(espgw, cfg, "inbound", frames, tmp_path)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert len(out) == len(plain)
    for i, (frame, orig) in enumerate(zip(out, plain)):
        assert l3(frame) == raw(orig), f"packet {i}"
    # Replaying scapy's packets: each is dropped as a replay.
    _, again = run_pcap(espgw, cfg, "inbound", frames + frames, tmp_path)
    assert again["decrypted"] == len(plain)
    assert again["drops"]["replay"] == len(plain)


def test_tampered_scapy_packets_are_dropped(espgw, tmp_path):
    """scapy's ESP with one flipped byte in each region is dropped by reason."""
    sa = Sa(spi=0x2001, direction="in", key=KEYS[128], mode="ipv4-tunnel")
    gw = Gateway(sas=[sa], policies=[("in", "203.0.113.0/24", "198.51.100.0/24", sa.spi)])
    cfg = gw.write(tmp_path / "gw.toml", "native")
    peer = scapy_sa(sa, scapy_sends=True)
    good = peer.encrypt(IP(src="203.0.113.20", dst="198.51.100.10") / UDP() / Raw(b"x" * 40))
    b = bytearray(raw(good))
    cases = {"seq": 20 + 7, "iv": 20 + 10, "ciphertext": 20 + 30, "icv": len(b) - 3}
    frames = []
    for off in cases.values():
        t = bytearray(b)
        # 0x02, not 0x01: turning sequence number 1 into 0 would be refused as a replay
        # (0 is never valid) before authentication is even tried.
        t[off] ^= 2
        frames.append(ether(IP(bytes(t))))
    wrong_spi = bytearray(b)
    wrong_spi[20] ^= 0x40
    frames.append(ether(IP(bytes(wrong_spi))))
    out, counters = run_pcap(espgw, cfg, "inbound", frames, tmp_path)
    assert out == []
    assert counters["drops"]["auth_failed"] == 4
    assert counters["drops"]["no_sa"] == 1
    assert counters["sas"][0]["drops"]["auth_failed"] == 4


# A host behind a NAT: scapy's ESP (transport mode, NAT-T) leaves it with the host's own
# address, and the NAT rewrites the IP source to its public one (the address espgw's
# policy names, HOSTS' second) on the way. Documentation ranges only.
BEHIND_NAT = {4: "192.0.2.100", 6: "2001:db8:2::100"}


@pytest.mark.parametrize("fam", [4, 6])
def test_nat_t_transport_checksums_are_fixed_after_a_nat(espgw, tmp_path, fam):
    """RFC 3948 §3.1.2: the TCP/UDP (and ICMPv6) checksum under the encryption was made
    for the sender's own address, which a NAT then rewrote. espgw recomputes it, and the
    packet it forwards is the one scapy builds for the addresses received, byte for byte.
    An IPv4 UDP datagram without a checksum keeps none. The same packets without UDP
    encapsulation (no NAT can have rewritten them) are forwarded as they came."""
    sa = Sa(spi=0x2001, direction="in", key=KEYS[128], mode="transport", udp=True)
    a, public = HOSTS[fam]
    src, dst = selectors(fam, "transport", "in")
    cfg = Gateway(sas=[sa], policies=[("in", src, dst, sa.spi)]).write(
        tmp_path / "gw.toml", "native")
    plain = inner_packets(fam, BEHIND_NAT[fam], a)
    if fam == 4:
        plain.append(IP(raw(IP(src=BEHIND_NAT[4], dst=a) / UDP(sport=9, dport=9, chksum=0)
                            / Raw(b"no checksum"))))
    peer = scapy_sa(sa, scapy_sends=True)
    peer.seq_num = 1
    frames = []
    for p in plain:
        enc = nat_t_fix(peer.encrypt(p))
        enc.src = public  # the NAT, which fixes the checksums it can see
        if fam == 4:
            del enc[IP].chksum
        del enc[UDP].chksum
        frames.append(ether(enc.__class__(raw(enc))))
    out, counters = run_pcap(espgw, cfg, "inbound", frames, tmp_path)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert len(out) == len(plain)
    fixed = 0
    for i, (frame, orig) in enumerate(zip(out, plain)):
        want = orig.copy()
        want.src = public
        if fam == 4:
            del want[IP].chksum
        if TCP in want:
            del want[TCP].chksum
        elif UDP in want and not (fam == 4 and want[UDP].chksum == 0):
            del want[UDP].chksum
        elif ICMPv6EchoRequest in want:
            del want[ICMPv6EchoRequest].cksum
        else:
            fixed -= 1
        fixed += 1
        want = want.__class__(raw(want))
        assert l3(frame) == raw(want), f"packet {i}"
        assert raw(want) != raw(orig.__class__(raw(orig)))
    assert fixed == (4 if fam == 4 else 6)

    # Without UDP encapsulation no NAT can be in the way: nothing is recomputed, so a
    # rewritten source leaves the checksums as they were (wrong for it).
    plain_sa = Sa(spi=0x2002, direction="in", key=KEYS[128], mode="transport")
    cfg = Gateway(sas=[plain_sa], policies=[("in", src, dst, plain_sa.spi)]).write(
        tmp_path / "gw-plain.toml", "native")
    peer = scapy_sa(plain_sa, scapy_sends=True)
    peer.seq_num = 1
    frames = []
    for p in plain:
        enc = peer.encrypt(p)
        enc.src = public
        if fam == 4:
            del enc[IP].chksum
        frames.append(ether(enc.__class__(raw(enc))))
    out, counters = run_pcap(espgw, cfg, "inbound", frames, tmp_path)
    assert len(out) == len(plain), counters
    for i, (frame, orig) in enumerate(zip(out, plain)):
        as_sent = orig.copy()
        as_sent.src = public
        if fam == 4:
            del as_sent[IP].chksum
        assert l3(frame) == raw(as_sent.__class__(raw(as_sent))), f"packet {i}"
