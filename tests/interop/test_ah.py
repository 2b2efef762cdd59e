"""AH (RFC 4302) and ESP+AH bundles against independent implementations.

- scapy 2.5's AH (HMAC-SHA1-96, HMAC-SHA-256-128/-384-192/-512-256, HMAC-MD5-96): both
  directions, IPv4 and IPv6 tunnel, IPv4 and IPv6 transport, with ESN; packets with IPv4
  options (router alert kept, timestamp zeroed) and an IPv6 hop-by-hop option marked mutable.
  scapy's `zero_mutable_fields` is the reference for what the ICV covers.
- AES-GMAC (RFC 4543 §3, §5) and AES-XCBC-MAC-96 (RFC 3566) in AH, which scapy lacks: the
  ICV is computed here with pyca/cryptography over scapy's zeroed copy of the packet.
- Mutable fields really are outside the ICV (a router's TTL and DSCP rewrite still passes);
  immutable ones and the payload are inside (one flipped bit is `auth_failed`); a replayed
  packet is `replay`; wrong key lengths name file, line and field.
- The classic setkey script (ESP 3DES-CBC + HMAC-SHA1 inside AH HMAC-MD5, transport mode,
  both directions): refused without the legacy switch, and with it interoperating with
  scapy applying ESP then AH (and removing AH then ESP); ESP arriving without the AH the
  bundle requires is `policy_mismatch`.
"""
import contextlib
import json
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from scapy.all import (ICMP, IP, bind_layers, split_layers, TCP, UDP, IPOption, IPOption_Router_Alert, IPv6,
                       IPv6ExtHdrHopByHop, HBHOptUnknown, Raw, raw, rdpcap, wrpcap)
from scapy.layers.ipsec import AH, ESP, SecurityAssociation, zero_mutable_fields

from helpers import OUTER, ether, fresh_state, l3
from test_algorithms import ESN_START, HOSTS, LEGACY, NETS, xcbc

# espgw name -> (scapy name, key length, ICV length)
ALGS = {
    "hmac-sha1-96": ("HMAC-SHA1-96", 20, 12),
    "hmac-sha256-128": ("SHA2-256-128", 32, 16),
    "hmac-sha384-192": ("SHA2-384-192", 48, 24),
    "hmac-sha512-256": ("SHA2-512-256", 64, 32),
    "hmac-md5-96": ("HMAC-MD5-96", 16, 12),
}
SHAPES = {"v4-tunnel": ("ipv4-tunnel", 4), "v6-tunnel": ("ipv6-tunnel", 6),
          "v4-transport": ("transport", 4), "v6-transport": ("transport", 6)}


def key_of(n, seed=9):
    return bytes((i * 11 + seed) & 0xff for i in range(n))


def config_text(direction, spi, mode, fam, integ, key, esn=False):
    if mode == "transport":
        src, dst = (h + ("/32" if fam == 4 else "/128") for h in HOSTS[fam])
    else:
        src, dst = NETS[fam]
    if direction == "in":
        src, dst = dst, src
    lines = ["[[sa]]", f'direction = "{direction}"', f"spi = {spi}", f'mode = "{mode}"',
             'protocol = "ah"', f'integrity = "{integ}"', f'integrity_key = "0x{key.hex()}"',
             f"esn = {str(esn).lower()}", f"initial_seq = {ESN_START - 1 if esn else 0}"]
    if mode != "transport":
        a, b = OUTER[fam]
        local, remote = (a, b) if direction == "out" else (b, a)
        lines += [f'local = "{local}"', f'remote = "{remote}"']
    lines += ["", "[[policy]]", f'direction = "{direction}"', f'src = "{src}"', f'dst = "{dst}"',
              'action = "protect"', f"sa = {spi}", ""]
    for d in ("0.0.0.0/0", "::/0"):
        lines += ["[[route]]", f'dst = "{d}"', "port = 1", ""]
    return "\n".join(lines)


def run(espgw, cfg, direction, frames, tmp, extra=()):
    inp, out = tmp / f"in-{direction}.pcap", tmp / f"out-{direction}.pcap"
    wrpcap(str(inp), frames)
    r = subprocess.run([str(espgw), *extra, "pcap", *fresh_state(), "--config", str(cfg), "--direction", direction,
                        "--input", str(inp), "--output", str(out), "--json"],
                       capture_output=True, text=True, check=True)
    return list(rdpcap(str(out))), json.loads(r.stdout), r.stderr


def inner(fam, src, dst, options=False):
    """Plain packets of several sizes and protocols; with `options`, IPv4 options (router
    alert: immutable; timestamp: mutable) or an IPv6 hop-by-hop header holding an option
    whose type says its data may change en route."""
    pkts = []
    for i, size in enumerate([0, 1, 17, 100, 1000]):
        if fam == 4:
            opts = [IPOption_Router_Alert(), IPOption(b"\x44\x08\x05\x00\x01\x02\x03\x04")] if options else []
            ip = IP(src=src, dst=dst, ttl=61, tos=0x28, options=opts)
        else:
            ip = IPv6(src=src, dst=dst, hlim=61, tc=0x28, fl=0x12345)
            if options:
                ip = ip / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x3e, optdata=b"\xaa\xbb\xcc\xdd")])
        l4 = [UDP(sport=1000 + i, dport=53), TCP(sport=2000 + i, dport=80, flags="PA"),
              ICMP(id=i, seq=i) if fam == 4 else UDP(sport=3, dport=4)][i % 3]
        pkts.append(ip / l4 / Raw(bytes((i + j) & 0xff for j in range(size))))
    return [p.__class__(raw(p)) for p in pkts]


def scapy_ah(integ, key, spi, mode, fam, sender_is_espgw, esn=False):
    tunnel = None
    if mode != "transport":
        a, b = OUTER[fam]
        src, dst = (a, b) if sender_is_espgw else (b, a)
        tunnel = IP(src=src, dst=dst) if fam == 4 else IPv6(src=src, dst=dst)
    return SecurityAssociation(AH, spi=spi, auth_algo=ALGS[integ][0], auth_key=key,
                               tunnel_header=tunnel, esn_en=esn,
                               esn=(ESN_START >> 32) if esn else 0)


def outer_ip(frame):
    return frame[IP] if IP in frame else frame[IPv6]


CASES = [(integ, shape, esn) for integ in ALGS for shape in SHAPES for esn in (False, True)
         if not (esn and shape != "v4-tunnel")]


def case_id(c):
    integ, shape, esn = c
    return f"{integ}-{shape}{'-esn' if esn else ''}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_espgw_adds_ah_scapy_verifies(espgw, tmp_path, case):
    integ, shape, esn = case
    mode, fam = SHAPES[shape]
    key = key_of(ALGS[integ][1])
    cfg = tmp_path / "gw.toml"
    cfg.write_text(config_text("out", 0x1101, mode, fam, integ, key, esn))
    legacy = LEGACY if integ == "hmac-md5-96" else []
    for options in (False, True):
        plain = inner(fam, *HOSTS[fam], options=options)
        out, counters, stderr = run(espgw, cfg, "outbound", [ether(p) for p in plain], tmp_path, legacy)
        assert counters["encrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
        if legacy:
            assert "deprecated by RFC 8221" in stderr
        peer = scapy_ah(integ, key, 0x1101, mode, fam, True, esn)
        for i, (frame, orig) in enumerate(zip(out, plain)):
            ip = outer_ip(frame)
            assert AH in ip and ip[AH].seq == ((ESN_START if esn else 1) + i) & 0xffffffff
            # Strict on what it sends: ICV padded to 4 bytes over IPv4, 8 over IPv6 (scapy
            # reads ICV and padding as one field).
            align = 4 if (fam == 4) else 8
            assert len(ip[AH].icv) == -(-(12 + ALGS[integ][2]) // align) * align - 12
            # A router on the way may rewrite the mutable fields: still authentic.
            if fam == 4:
                ip.ttl, ip.tos = 7, 0xb8
                del ip.chksum
            else:
                ip.hlim, ip.tc, ip.fl = 7, 0xb8, 0x54321
            ip = ip.__class__(raw(ip))
            restored = peer.decrypt(ip)
            if mode != "transport":
                assert raw(restored) == raw(orig), f"packet {i}"
            else:
                # The payload and every immutable field come back unchanged.
                o = orig.copy()
                if fam == 4:
                    o.ttl, o.tos = 7, 0xb8
                    del o.chksum
                else:
                    o.hlim, o.tc, o.fl = 7, 0xb8, 0x54321
                assert raw(restored) == raw(o.__class__(raw(o))), f"packet {i}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_scapy_adds_ah_espgw_verifies(espgw, tmp_path, case):
    integ, shape, esn = case
    mode, fam = SHAPES[shape]
    key = key_of(ALGS[integ][1], seed=3)
    cfg = tmp_path / "gw.toml"
    cfg.write_text(config_text("in", 0x2101, mode, fam, integ, key, esn))
    legacy = LEGACY if integ == "hmac-md5-96" else []
    a, b = HOSTS[fam]
    plain = inner(fam, b, a) + inner(fam, b, a, options=True)
    peer = scapy_ah(integ, key, 0x2101, mode, fam, False, esn)
    peer.seq_num = (ESN_START & 0xffffffff) if esn else 1
    frames = [peer.encrypt(p) for p in plain]
    frames = [ether(f.__class__(raw(f))) for f in frames]
    out, counters, _ = run(espgw, cfg, "inbound", frames, tmp_path, legacy)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    for i, (frame, orig) in enumerate(zip(out, plain)):
        assert l3(frame) == raw(orig), f"packet {i}"

    # Mutable fields rewritten on the way (TTL / hop limit, DSCP, flow label): still
    # authentic, and the packet leaves as it arrived.
    moved = []
    for f in frames:
        ip = outer_ip(f).copy()
        if fam == 4:
            ip.ttl, ip.tos = 9, 0x48
            del ip.chksum
        else:
            ip.hlim, ip.tc, ip.fl = 9, 0x48, 0xabcde
        moved.append(ether(ip.__class__(raw(ip))))
    out, counters, _ = run(espgw, cfg, "inbound", moved, tmp_path, legacy)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}

    # Same packets again: replays. Then a fresh window, tampered packets.
    out, counters, _ = run(espgw, cfg, "inbound", frames[:2] + frames[:2], tmp_path, legacy)
    assert counters["decrypted"] == 2 and counters["drops"]["replay"] == 2, counters["drops"]
    bad = []
    for f in frames[:4]:
        ip = bytearray(l3(f))
        # Payload's last byte; the IPv4 identification / IPv6 payload length's neighbour
        # (the next-header byte of the fixed header is protected too: flip the source).
        for off in (len(ip) - 1, 4 if fam == 4 else 9):
            t = bytearray(ip)
            t[off] ^= 0x10
            pkt = IP(bytes(t)) if fam == 4 else IPv6(bytes(t))
            if fam == 4:
                del pkt.chksum
            bad.append(ether(pkt.__class__(raw(pkt))))
    out, counters, _ = run(espgw, cfg, "inbound", bad, tmp_path, legacy)
    assert out == [] and counters["drops"]["auth_failed"] == len(bad), counters["drops"]


# --- AES-GMAC and AES-XCBC-MAC-96 in AH: the ICV from pyca/cryptography --------------------

def pyca_ah_packet(kind, key, spi, seq, plain, esn):
    """An IPv4 transport-mode AH packet: scapy lays out the headers and zeroes the mutable
    fields; the ICV is AES-GMAC (IV = 8 bytes after the sequence number, RFC 4543 §3) or
    AES-XCBC-MAC-96 over that zeroed copy (+ the high sequence bits with ESN)."""
    iv = struct.pack("!Q", 0x0102030405060708 + seq) if kind == "gmac" else b""
    icv_len = 16 if kind == "gmac" else 12
    hdr = plain.copy()
    nh, payload = hdr.proto, hdr.payload
    hdr.remove_payload()
    hdr.proto = 51
    ah = AH(nh=nh, spi=spi, seq=seq & 0xffffffff, icv=iv + bytes(icv_len))
    ah.payloadlen = len(raw(ah)) // 4 - 2
    del hdr.len, hdr.chksum
    pkt = IP(raw(hdr / ah / payload))
    zeroed = bytearray(raw(zero_mutable_fields(pkt.copy(), sending=True)))
    at = len(raw(pkt)) - len(raw(pkt[AH])) + 12
    zeroed[at:at + len(iv)] = iv  # GMAC's IV is covered as sent, not zeroed
    covered = bytes(zeroed) + (struct.pack("!L", seq >> 32) if esn else b"")
    if kind == "gmac":
        tag = AESGCM(key[:-4]).encrypt(key[-4:] + iv, b"", covered)
    else:
        tag = xcbc(key, covered)[:12]
    return IP(raw(pkt)[:at + len(iv)] + tag + raw(pkt)[at + len(iv) + icv_len:])


@pytest.mark.parametrize("esn", [False, True])
@pytest.mark.parametrize("kind,bits", [("gmac", 128), ("gmac", 192), ("gmac", 256), ("xcbc", 128)])
def test_pyca_ah_gmac_and_xcbc(espgw, tmp_path, kind, bits, esn):
    k = bits // 8
    key = key_of(k + 4) if kind == "gmac" else key_of(16)
    integ = f"aes-{bits}-gmac" if kind == "gmac" else "aes-xcbc-mac-96"
    first = ESN_START if esn else 1
    a, b = HOSTS[4]
    cfg = tmp_path / "in.toml"
    cfg.write_text(config_text("in", 0x3101, "transport", 4, integ, key, esn))
    plain = inner(4, b, a) + inner(4, b, a, options=True)
    frames = [ether(pyca_ah_packet(kind, key, 0x3101, first + i, p, esn)) for i, p in enumerate(plain)]
    out, counters, _ = run(espgw, cfg, "inbound", frames, tmp_path)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert [l3(f) for f in out] == [raw(p) for p in plain]

    # espgw's packets equal what the pyca peer builds from the same plaintext (its IV for
    # GMAC is the sequence number, which the peer reads from the packet).
    cfg = tmp_path / "out.toml"
    cfg.write_text(config_text("out", 0x3102, "transport", 4, integ, key, esn))
    plain = inner(4, a, b) + inner(4, a, b, options=True)
    out, counters, _ = run(espgw, cfg, "outbound", [ether(p) for p in plain], tmp_path)
    assert counters["encrypted"] == len(plain)
    for i, (f, p) in enumerate(zip(out, plain)):
        seq = first + i
        got = f[IP]
        if kind == "gmac":
            assert got[AH].icv[:8] == struct.pack("!Q", seq)
        want = pyca_ah_packet(kind, key, 0x3102, seq, p, esn)
        if kind == "gmac":
            # Rebuild with espgw's IV.
            iv = got[AH].icv[:8]
            zeroed = bytearray(raw(zero_mutable_fields(got.copy(), sending=False)))
            at = len(raw(got)) - len(raw(got[AH])) + 12
            zeroed[at:at + 8] = iv
            covered = bytes(zeroed) + (struct.pack("!L", seq >> 32) if esn else b"")
            assert got[AH].icv[8:24] == AESGCM(key[:-4]).encrypt(key[-4:] + iv, b"", covered), f"packet {i}"
            assert raw(got.payload.payload) == raw(want.payload.payload)
        else:
            assert raw(got) == raw(want), f"packet {i}"


# --- configuration ----------------------------------------------------------------------

@pytest.mark.parametrize("integ", list(ALGS) + ["aes-128-gmac", "aes-xcbc-mac-96"])
def test_wrong_ah_key_length_names_file_line_and_field(espgw, tmp_path, integ):
    cfg = tmp_path / "gw.toml"
    cfg.write_text(config_text("out", 0x4101, "transport", 4, integ, key_of(15)))
    r = subprocess.run([str(espgw), *LEGACY, "check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{cfg}:7: integrity_key:" in r.stderr, r.stderr


def test_ah_refuses_encryption_and_udp(espgw, tmp_path):
    cfg = tmp_path / "gw.toml"
    text = config_text("out", 0x4102, "transport", 4, "hmac-sha256-128", key_of(32))
    cfg.write_text(text.replace('protocol = "ah"', 'protocol = "ah"\ncipher = "aes-128-cbc"'))
    r = subprocess.run([str(espgw), "check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0 and "cipher: AH does not encrypt" in r.stderr, r.stderr
    cfg.write_text(text.replace('protocol = "ah"', 'protocol = "ah"\nudp_encap = true'))
    r = subprocess.run([str(espgw), "check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0 and "AH cannot be carried in UDP" in r.stderr, r.stderr


# --- the classic setkey example: ESP 3DES-CBC + HMAC-SHA1 inside AH HMAC-MD5 ------------

CLASSIC = """#!/usr/sbin/setkey -f
flush;
spdflush;
# AH
add 198.51.100.10 203.0.113.20 ah 15700 -A hmac-md5 "1234567890123456";
add 203.0.113.20 198.51.100.10 ah 24500 -A hmac-md5 "6543210987654321";
# ESP
add 198.51.100.10 203.0.113.20 esp 15701 -E 3des-cbc "123456789012123456789012"
    -A hmac-sha1 "12345678901234567890";
add 203.0.113.20 198.51.100.10 esp 24501 -E 3des-cbc "210987654321210987654321"
    -A hmac-sha1 "09876543210987654321";
spdadd 198.51.100.10 203.0.113.20 any -P out ipsec
    esp/transport//require
    ah/transport//require;
spdadd 203.0.113.20 198.51.100.10 any -P in ipsec
    esp/transport//require
    ah/transport//require;
"""
# The howto this script comes from uses one set of keys both ways, which espgw refuses
# (test_classic_setkey_script_with_one_key_both_ways); here each direction has its own.
KEYS = {  # SPI of the ESP SA -> (ESP key, ESP HMAC key, AH key)
    15701: (b"123456789012123456789012", b"12345678901234567890", b"1234567890123456"),
    24501: (b"210987654321210987654321", b"09876543210987654321", b"6543210987654321"),
}


def classic_peers(esp_spi, ah_spi):
    esp_key, esp_auth, ah_key = KEYS[esp_spi]
    esp = SecurityAssociation(ESP, spi=esp_spi, crypt_algo="3DES", crypt_key=esp_key,
                              auth_algo="HMAC-SHA1-96", auth_key=esp_auth)
    ah = SecurityAssociation(AH, spi=ah_spi, auth_algo="HMAC-MD5-96", auth_key=ah_key)
    return esp, ah


@contextlib.contextmanager
def esp_undissected():
    """scapy 2.5's AuthAlgo.sign takes its ESP branch whenever a packet has an ESP layer,
    even one inside AH, and then leaves AH's ICV zero. With IP's protocol 50 not bound to
    ESP while AH is added, the ESP packet stays raw bytes and AH is signed as RFC 4302 says."""
    split_layers(IP, ESP, proto=50)
    try:
        yield
    finally:
        bind_layers(IP, ESP, proto=50)


def esp_then_ah(esp, ah, p):
    """What the sending end of the bundle does: ESP, then AH around it."""
    e = raw(esp.encrypt(p))
    with esp_undissected():
        return IP(raw(ah.encrypt(IP(e))))


def test_classic_setkey_script_with_one_key_both_ways(espgw, tmp_path):
    """The howto's form, one key for both directions, is refused, naming both SAs."""
    one_key = (CLASSIC.replace('"6543210987654321"', '"1234567890123456"')
               .replace('"210987654321210987654321"', '"123456789012123456789012"')
               .replace('"09876543210987654321"', '"12345678901234567890"'))
    cfg = tmp_path / "ipsec.conf"
    cfg.write_text(one_key)
    empty = tmp_path / "one.pcap"
    wrpcap(str(empty), [ether(IP(src="198.51.100.1", dst="203.0.113.1") / UDP())])
    r = subprocess.run([str(espgw), *LEGACY, "pcap", *fresh_state(), "--config", str(cfg),
                        "--direction", "outbound", "--input", str(empty),
                        "--output", str(tmp_path / "o.pcap")], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{cfg}:6: key: SA in 0x00005fb4 has the same key as SA out 0x00003d54 at line 5" \
        in r.stderr, r.stderr
    assert "1234567890" not in r.stderr, "no key bytes in the message"


def test_classic_setkey_script(espgw, tmp_path):
    cfg = tmp_path / "ipsec.conf"
    cfg.write_text(CLASSIC)
    empty = tmp_path / "one.pcap"
    wrpcap(str(empty), [ether(IP(src="198.51.100.1", dst="203.0.113.1") / UDP())])
    base = ["pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound", "--input", str(empty),
            "--output", str(tmp_path / "o.pcap")]
    # Refused without the legacy switch, naming the first legacy SA's line and the switch.
    r = subprocess.run([str(espgw), *base], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{cfg}:5: algorithm: ah/hmac-md5-96 is deprecated" in r.stderr, r.stderr
    assert "--allow-legacy-crypto" in r.stderr
    a, b = HOSTS[4]

    # Outbound: espgw applies ESP then AH; scapy verifies and removes AH, then ESP.
    plain = inner(4, a, b)
    out, counters, stderr = run(espgw, cfg, "outbound", [ether(p) for p in plain], tmp_path, LEGACY)
    assert counters["encrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert "deprecated by RFC 8221" in stderr
    esp, ah = classic_peers(15701, 15700)
    for i, (f, p) in enumerate(zip(out, plain)):
        assert f[IP].proto == 51 and f[AH].nh == 50 and f[AH].seq == i + 1
        assert raw(f[AH].payload)[:8] == struct.pack("!LL", 15701, i + 1)
        without_ah = IP(raw(ah.decrypt(f[IP])))
        assert without_ah.proto == 50
        assert raw(esp.decrypt(without_ah)) == raw(p), f"packet {i}"

    # Inbound: scapy applies ESP then AH; espgw removes both.
    esp, ah = classic_peers(24501, 24500)
    plain = inner(4, b, a)
    frames = [ether(esp_then_ah(esp, ah, p)) for p in plain]
    out, counters, _ = run(espgw, cfg, "inbound", frames, tmp_path, LEGACY)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert [l3(f) for f in out] == [raw(p) for p in plain]

    # The bundle requires both: ESP alone, or AH alone around plaintext, is refused.
    esp, ah = classic_peers(24501, 24500)
    esp.seq_num = ah.seq_num = 100
    only_esp = [ether(esp.encrypt(p)) for p in plain[:2]]
    only_ah = [ether(ah.encrypt(p)) for p in plain[:2]]
    out, counters, _ = run(espgw, cfg, "inbound", only_esp + only_ah, tmp_path, LEGACY)
    assert out == [] and counters["drops"]["policy_mismatch"] == 4, counters["drops"]
    # A tampered AH around good ESP: auth_failed, and ESP is never opened.
    frames = [ether(esp_then_ah(esp, ah, p)) for p in plain[:2]]
    bad = [ether(IP(raw(f[IP])[:-1] + bytes([raw(f[IP])[-1] ^ 1]))) for f in frames]
    out, counters, _ = run(espgw, cfg, "inbound", bad, tmp_path, LEGACY)
    assert out == [] and counters["drops"]["auth_failed"] == 2, counters["drops"]


def test_setkey_bundle_order_and_missing_sa(espgw, tmp_path):
    cfg = tmp_path / "ipsec.conf"
    swapped = CLASSIC.replace("    esp/transport//require\n    ah/transport//require;",
                              "    ah/transport//require\n    esp/transport//require;", 1)
    cfg.write_text(swapped)
    r = subprocess.run([str(espgw), *LEGACY, "check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0 and f"{cfg}:14: ipsec rule: a bundle is esp/... followed by ah/..." in r.stderr, r.stderr
    no_ah = "\n".join(l for l in CLASSIC.splitlines() if "ah 15700" not in l) + "\n"
    cfg.write_text(no_ah)
    r = subprocess.run([str(espgw), *LEGACY, "check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0 and "no SA for ah/transport between 198.51.100.10/32 and 203.0.113.20/32" in r.stderr, r.stderr
