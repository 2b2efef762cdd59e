"""The full ESP algorithm suite against independent implementations.

- scapy 2.5 (pyca/cryptography underneath) for every algorithm it implements: AES-CBC and
  AES-CTR (128/192/256) with HMAC-SHA1-96, HMAC-SHA-256-128, -384-192, -512-256 and
  HMAC-MD5-96; 3DES-CBC; NULL with integrity; AES-CCM (128/192/256, 16-byte ICV);
  ChaCha20-Poly1305. Both directions, tunnel (IPv4, IPv6) and transport, with and without ESN.
  scapy 2.5 leaves the ESN high bits out of ESP's separate ICV (RFC 4303 §3.3.2.1 puts them
  in; its AEAD and AH code does it right), so with ESN and a separate integrity algorithm the
  ICV is computed and checked here with Python's hmac, and scapy does the cipher.
- AES-GMAC (RFC 4543) and AES-XCBC-MAC-96 (RFC 3566), which scapy lacks: a peer written
  here over pyca/cryptography's AESGCM / AES-ECB, as the RFCs define them.
- tshark decrypts and verifies the ESP algorithms its dissector knows (AES-CBC, AES-CTR,
  3DES-CBC, NULL with HMAC-SHA1/SHA2/MD5).
- Per algorithm: tampered ICV and ciphertext are dropped as auth_failed; a wrong key length
  in the configuration is an error naming file, line and field; legacy algorithms load only
  under --allow-legacy-crypto and NULL/NULL only under --allow-null-null.
"""
import hashlib
import hmac
import re
import shutil
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from scapy.all import ICMP, IP, TCP, UDP, IPv6, Raw, raw, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

from helpers import OUTER, ether, fresh_state, l3, run_pcap

HOSTS = {4: ("198.51.100.10", "203.0.113.20"), 6: ("2001:db8:100::10", "2001:db8:113::20")}
NETS = {4: ("198.51.100.0/24", "203.0.113.0/24"), 6: ("2001:db8:100::/64", "2001:db8:113::/64")}
SHAPES = {"v4-in-v4": ("ipv4-tunnel", 4), "v6-in-v6": ("ipv6-tunnel", 6), "transport-v4": ("transport", 4)}
ESN_START = (1 << 32) + 40
LEGACY = ["--allow-legacy-crypto"]

HASHES = {"hmac-sha1-96": (hashlib.sha1, 12), "hmac-sha256-128": (hashlib.sha256, 16),
          "hmac-sha384-192": (hashlib.sha384, 24), "hmac-sha512-256": (hashlib.sha512, 32),
          "hmac-md5-96": (hashlib.md5, 12)}


def esn_icv(alg, covered, seq):
    """RFC 4303 §3.3.2.1: the ICV over the ESP packet and the high sequence bits."""
    h, n = HASHES[alg.integ]
    return hmac.new(alg.auth_key, covered + struct.pack("!L", seq >> 32), h).digest()[:n]


INTEG = {  # espgw name -> (scapy name, key length, tshark name)
    "hmac-sha1-96": ("HMAC-SHA1-96", 20, "HMAC-SHA-1-96 [RFC2404]"),
    "hmac-sha256-128": ("SHA2-256-128", 32, "HMAC-SHA-256-128 [RFC4868]"),
    "hmac-sha384-192": ("SHA2-384-192", 48, "HMAC-SHA-384-192 [RFC4868]"),
    "hmac-sha512-256": ("SHA2-512-256", 64, "HMAC-SHA-512-256 [RFC4868]"),
    "hmac-md5-96": ("HMAC-MD5-96", 16, "HMAC-MD5-96 [RFC2403]"),
}


class Alg:
    """One ESP transform as espgw's native format, scapy and tshark name it."""

    def __init__(self, name, cipher=None, enc_len=0, integ=None, aead=None, scapy_crypt=None,
                 tshark_enc=None):
        self.name, self.cipher, self.integ, self.aead = name, cipher, integ, aead
        self.enc_key = bytes((i * 7 + 3) & 0xff for i in range(enc_len))
        self.auth_key = bytes((i * 5 + 1) & 0xff for i in range(INTEG[integ][1])) if integ else b""
        self.scapy_crypt, self.tshark_enc = scapy_crypt, tshark_enc

    @property
    def legacy(self):
        return self.cipher == "3des-cbc" or self.integ == "hmac-md5-96"

    def native(self):
        if self.aead:
            return [f'aead = "{self.aead}"', f'key = "0x{self.enc_key.hex()}"']
        out = []
        if self.cipher:
            out.append(f'cipher = "{self.cipher}"')
            if self.enc_key:
                out.append(f'cipher_key = "0x{self.enc_key.hex()}"')
        out += [f'integrity = "{self.integ}"', f'integrity_key = "0x{self.auth_key.hex()}"']
        return out

    def scapy_args(self):
        a = dict(crypt_algo=self.scapy_crypt, crypt_key=self.enc_key or None)
        if self.integ:
            a.update(auth_algo=INTEG[self.integ][0], auth_key=self.auth_key)
        return a


def scapy_algs():
    out = []
    for bits in (128, 192, 256):
        k = bits // 8
        for integ in ("hmac-sha1-96", "hmac-sha256-128", "hmac-sha384-192", "hmac-sha512-256"):
            out.append(Alg(f"aes-{bits}-cbc+{integ}", f"aes-{bits}-cbc", k, integ,
                           scapy_crypt="AES-CBC", tshark_enc="AES-CBC [RFC3602]"))
        out.append(Alg(f"aes-{bits}-ctr+hmac-sha256-128", f"aes-{bits}-ctr", k + 4, "hmac-sha256-128",
                       scapy_crypt="AES-CTR", tshark_enc="AES-CTR [RFC3686]"))
        out.append(Alg(f"aes-{bits}-ccm", aead=f"aes-{bits}-ccm", enc_len=k + 3, scapy_crypt="AES-CCM"))
    out.append(Alg("aes-128-ctr+hmac-sha1-96", "aes-128-ctr", 20, "hmac-sha1-96",
                   scapy_crypt="AES-CTR", tshark_enc="AES-CTR [RFC3686]"))
    out.append(Alg("aes-128-cbc+hmac-md5-96", "aes-128-cbc", 16, "hmac-md5-96",
                   scapy_crypt="AES-CBC", tshark_enc="AES-CBC [RFC3602]"))
    out.append(Alg("3des-cbc+hmac-sha1-96", "3des-cbc", 24, "hmac-sha1-96",
                   scapy_crypt="3DES", tshark_enc="TripleDES-CBC [RFC2451]"))
    out.append(Alg("null+hmac-sha256-128", "null", 0, "hmac-sha256-128",
                   scapy_crypt="NULL", tshark_enc="NULL"))
    out.append(Alg("null+hmac-md5-96", "null", 0, "hmac-md5-96", scapy_crypt="NULL", tshark_enc="NULL"))
    out.append(Alg("chacha20-poly1305", aead="chacha20-poly1305", enc_len=36,
                   scapy_crypt="CHACHA20-POLY1305"))
    return out


ALGS = scapy_algs()


def write_config(path, alg, direction, mode, fam, esn, spi):
    src, dst = NETS[fam] if mode != "transport" else tuple(
        h + "/32" for h in HOSTS[fam])
    if direction == "in":
        src, dst = dst, src
    lines = ["[[sa]]", f'direction = "{direction}"', f"spi = {spi}", f'mode = "{mode}"',
             f"esn = {str(esn).lower()}", f"initial_seq = {ESN_START - 1 if esn else 0}"]
    lines += alg.native()
    if mode != "transport":
        a, b = OUTER[6 if mode == "ipv6-tunnel" else 4]
        local, remote = (a, b) if direction == "out" else (b, a)
        lines += [f'local = "{local}"', f'remote = "{remote}"']
    lines += ["", "[[policy]]", f'direction = "{direction}"', f'src = "{src}"', f'dst = "{dst}"',
              'action = "protect"', f"sa = {spi}", ""]
    for d in ("0.0.0.0/0", "::/0"):
        lines += ["[[route]]", f'dst = "{d}"', "port = 1", ""]
    path.write_text("\n".join(lines))
    return path


def inner(fam, src, dst):
    ip = (lambda: IP(src=src, dst=dst, ttl=61)) if fam == 4 else (lambda: IPv6(src=src, dst=dst, hlim=61))
    pkts = []
    for i, size in enumerate([0, 1, 15, 16, 17, 100, 1000]):
        l4 = [UDP(sport=1000 + i, dport=53), TCP(sport=2000 + i, dport=80, flags="PA"),
              ICMP(id=i, seq=i) if fam == 4 else UDP(sport=3, dport=4)][i % 3]
        pkts.append(ip() / l4 / Raw(bytes((i + j) & 0xff for j in range(size))))
    return [p.__class__(raw(p)) for p in pkts]


def scapy_peer(alg, mode, direction_of_espgw, esn, spi):
    tunnel = None
    if mode != "transport":
        a, b = OUTER[6 if mode == "ipv6-tunnel" else 4]
        # espgw is a; scapy is b. Packets scapy sends go b -> a.
        src, dst = (b, a) if direction_of_espgw == "in" else (a, b)
        tunnel = IP(src=src, dst=dst) if ":" not in a else IPv6(src=src, dst=dst)
    return SecurityAssociation(ESP, spi=spi, tunnel_header=tunnel, esn_en=esn,
                               esn=(ESN_START >> 32) if esn else 0, **alg.scapy_args())


def run(espgw, cfg, direction, frames, tmp, legacy):
    """run_pcap with the switches a legacy algorithm needs."""
    inp, out = tmp / f"in-{direction}.pcap", tmp / f"out-{direction}.pcap"
    wrpcap(str(inp), frames)
    args = [str(espgw)] + (LEGACY if legacy else []) + [
        "pcap", *fresh_state(), "--config", str(cfg), "--direction", direction, "--input", str(inp),
        "--output", str(out), "--json"]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    import json
    from scapy.all import rdpcap
    return list(rdpcap(str(out))), json.loads(r.stdout), r.stderr


CASES = [(a, shape, esn) for a in ALGS for shape in SHAPES for esn in (False, True)
         if not (esn and shape != "v4-in-v4")]


def case_id(c):
    a, shape, esn = c
    return f"{a.name}-{shape}{'-esn' if esn else ''}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_espgw_encrypts_scapy_decrypts(espgw, tmp_path, case):
    alg, shape, esn = case
    mode, fam = SHAPES[shape]
    cfg = write_config(tmp_path / "gw.toml", alg, "out", mode, fam, esn, 0x1001)
    plain = inner(fam, *HOSTS[fam])
    out, counters, stderr = run(espgw, cfg, "outbound", [ether(p) for p in plain], tmp_path, alg.legacy)
    assert counters["encrypted"] == len(plain), counters
    if alg.legacy:
        assert "deprecated by RFC 8221" in stderr, stderr
    peer = scapy_peer(alg, mode, "out", esn, 0x1001)
    for i, (frame, orig) in enumerate(zip(out, plain)):
        outer = frame[IP] if IP in frame else frame[IPv6]
        seq = (ESN_START if esn else 1) + i
        assert frame[ESP].seq == seq & 0xffffffff
        if esn and alg.integ:
            esp = raw(frame[ESP])
            n = HASHES[alg.integ][1]
            assert esp[-n:] == esn_icv(alg, esp[:-n], seq), f"packet {i}: ESN ICV"
            assert raw(peer.decrypt(outer, verify=False)) == raw(orig), f"packet {i}"
        else:
            assert raw(peer.decrypt(outer)) == raw(orig), f"packet {i}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_scapy_encrypts_espgw_decrypts(espgw, tmp_path, case):
    alg, shape, esn = case
    mode, fam = SHAPES[shape]
    cfg = write_config(tmp_path / "gw.toml", alg, "in", mode, fam, esn, 0x2001)
    a, b = HOSTS[fam]
    plain = inner(fam, b, a)
    peer = scapy_peer(alg, mode, "in", esn, 0x2001)
    peer.seq_num = (ESN_START & 0xffffffff) if esn else 1
    frames = [peer.encrypt(p) for p in plain]
    if esn and alg.integ:
        n = HASHES[alg.integ][1]
        for i, f in enumerate(frames):
            esp = raw(f[ESP])[:-n]
            icv = esn_icv(alg, esp, ESN_START + i)
            f[ESP].data = f[ESP].data[:-n] + icv
    frames = [ether(f.__class__(raw(f))) for f in frames]
    out, counters, _ = run(espgw, cfg, "inbound", frames, tmp_path, alg.legacy)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    for i, (frame, orig) in enumerate(zip(out, plain)):
        assert l3(frame) == raw(orig), f"packet {i}"
    # Tampered ICV and tampered ciphertext (or payload, for NULL): dropped, counted.
    bad = []
    for f in frames[:3]:
        ip = bytearray(raw(f[IP] if IP in f else f[IPv6]))
        hdr = 20 if IP in f else 40
        for off in (len(ip) - 1, hdr + 8 + 16 + 2 if len(ip) > hdr + 8 + 16 + 4 + 12 else len(ip) - 20):
            t = bytearray(ip)
            t[off] ^= 0x10
            bad.append(ether(IP(bytes(t)) if IP in f else IPv6(bytes(t))))
    out, counters, _ = run(espgw, cfg, "inbound", bad, tmp_path, alg.legacy)
    assert out == []
    assert counters["drops"]["auth_failed"] == len(bad), counters["drops"]


# --- AES-GMAC and AES-XCBC-MAC-96: a peer over pyca/cryptography -------------------------

def xcbc(key, msg):
    """RFC 3566 AES-XCBC-MAC (full 16 bytes), from AES-ECB."""
    enc = lambda k, b: Cipher(algorithms.AES(k), modes.ECB()).encryptor().update(b)
    k1, k2, k3 = (enc(key, bytes([c]) * 16) for c in (1, 2, 3))
    blocks = [msg[i:i + 16] for i in range(0, len(msg), 16)] or [b""]
    e = bytes(16)
    for blk in blocks[:-1]:
        e = enc(k1, bytes(x ^ y for x, y in zip(e, blk)))
    last = blocks[-1]
    if len(last) == 16:
        last = bytes(x ^ y for x, y in zip(last, k2))
    else:
        last = last + b"\x80" + bytes(15 - len(last))
        last = bytes(x ^ y for x, y in zip(last, k3))
    return enc(k1, bytes(x ^ y for x, y in zip(e, last)))


def test_xcbc_reference_matches_rfc3566():
    key = bytes(range(16))
    assert xcbc(key, b"").hex() == "75f0251d528ac01c4573dfd584d79f29"
    assert xcbc(key, bytes(range(20))).hex() == "47f51b4564966215b8985c63055ed308"


def trailer(payload, nh, block=4):
    pad = (-(len(payload) + 2)) % block
    return payload + bytes(range(1, pad + 1)) + bytes([pad, nh])


def pyca_esp(kind, key, spi, seq, inner_pkt, esn):
    """An ESP packet (tunnel mode, IPv4 inner) as RFC 4543 (GMAC) or RFC 3686 + RFC 3566
    (AES-CTR with XCBC) build it."""
    text = trailer(raw(inner_pkt), 4)
    hdr = struct.pack("!LL", spi, seq & 0xffffffff)
    iv = struct.pack("!Q", 0x1122334455667788 + seq)
    hi = struct.pack("!L", seq >> 32)
    if kind == "gmac":
        k, salt = key[:-4], key[-4:]
        aad = hdr[:4] + (hi if esn else b"") + hdr[4:] + iv + text
        return hdr + iv + text + AESGCM(k).encrypt(salt + iv, b"", aad)
    ck, nonce, ak = key
    ctr = Cipher(algorithms.AES(ck), modes.CTR(nonce + iv + b"\x00\x00\x00\x01")).encryptor()
    body = hdr + iv + ctr.update(text)
    return body + xcbc(ak, body + (hi if esn else b""))[:12]


@pytest.mark.parametrize("bits", [128, 192, 256])
@pytest.mark.parametrize("esn", [False, True])
@pytest.mark.parametrize("kind", ["gmac", "ctr-xcbc"])
def test_pyca_peer_gmac_and_xcbc(espgw, tmp_path, bits, esn, kind):
    """espgw opens packets built by the pyca peer, and the pyca peer's check accepts
    espgw's (it rebuilds each with espgw's IV and compares byte for byte)."""
    k = bits // 8
    if kind == "gmac":
        key = bytes(range(40, 40 + k)) + b"\xca\xfe\xba\xbe"
        spec = [f'aead = "aes-{bits}-gmac"', f'key = "0x{key.hex()}"']
    else:
        ck, nonce, ak = bytes(range(k)), b"\x00\x00\x00\x30", bytes(range(100, 116))
        key = (ck, nonce, ak)
        spec = [f'cipher = "aes-{bits}-ctr"', f'cipher_key = "0x{(ck + nonce).hex()}"',
                'integrity = "aes-xcbc-mac-96"', f'integrity_key = "0x{ak.hex()}"']

    def config(direction, spi):
        a, b = OUTER[4]
        local, remote = (a, b) if direction == "out" else (b, a)
        src, dst = NETS[4] if direction == "out" else NETS[4][::-1]
        text = "\n".join(["[[sa]]", f'direction = "{direction}"', f"spi = {spi}", 'mode = "ipv4-tunnel"',
                          f'local = "{local}"', f'remote = "{remote}"', f"esn = {str(esn).lower()}",
                          f"initial_seq = {ESN_START - 1 if esn else 0}"] + spec +
                         ["", "[[policy]]", f'direction = "{direction}"', f'src = "{src}"',
                          f'dst = "{dst}"', 'action = "protect"', f"sa = {spi}", "",
                          "[[route]]", 'dst = "0.0.0.0/0"', "port = 1", ""])
        p = tmp_path / f"{direction}.toml"
        p.write_text(text)
        return p

    first = ESN_START if esn else 1
    plain = inner(4, HOSTS[4][1], HOSTS[4][0])
    frames = [ether(IP(src=OUTER[4][1], dst=OUTER[4][0], proto=50) /
                    Raw(pyca_esp(kind, key, 0x3001, first + i, p, esn))) for i, p in enumerate(plain)]
    out, counters, _ = run(espgw, config("in", 0x3001), "inbound", frames, tmp_path, False)
    assert counters["decrypted"] == len(plain), {k: v for k, v in counters["drops"].items() if v}
    assert [l3(f) for f in out] == [raw(p) for p in plain]

    plain = inner(4, *HOSTS[4])
    out, counters, _ = run(espgw, config("out", 0x3002), "outbound", [ether(p) for p in plain], tmp_path, False)
    assert counters["encrypted"] == len(plain)
    for i, (f, p) in enumerate(zip(out, plain)):
        esp = raw(f[IP].payload)
        seq = first + i
        if kind == "gmac":
            # GMAC leaves the payload readable: rebuild with espgw's IV and compare.
            iv = esp[8:16]
            k_, salt = key[:-4], key[-4:]
            hi = struct.pack("!L", seq >> 32)
            aad = esp[:4] + (hi if esn else b"") + esp[4:-16]
            assert AESGCM(k_).encrypt(salt + iv, b"", aad) == esp[-16:], f"packet {i}"
            assert esp[16:16 + len(raw(p))] == raw(p)
        else:
            ck, nonce, ak = key
            hi = struct.pack("!L", seq >> 32)
            assert xcbc(ak, esp[:-12] + (hi if esn else b""))[:12] == esp[-12:], f"packet {i}"
            iv = esp[8:16]
            dec = Cipher(algorithms.AES(ck), modes.CTR(nonce + iv + b"\x00\x00\x00\x01")).decryptor()
            assert dec.update(esp[16:-12])[:len(raw(p))] == raw(p)


# --- tshark ----------------------------------------------------------------------------

TSHARK_ALGS = [a for a in ALGS if a.tshark_enc]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("alg", TSHARK_ALGS, ids=lambda a: a.name)
def test_tshark_decrypts_and_verifies(espgw, tmp_path, alg):
    cfg = write_config(tmp_path / "gw.toml", alg, "out", "ipv4-tunnel", 4, False, 0x1001)
    plain = [ether(IP(src=HOSTS[4][0], dst=HOSTS[4][1]) / UDP(sport=1000 + i, dport=7000 + i) /
                   Raw(b"espgw" * i)) for i in range(5)]
    inp, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(inp), plain)
    subprocess.run([str(espgw)] + (LEGACY if alg.legacy else []) +
                   ["pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound", "--input", str(inp),
                    "--output", str(out)], check=True, capture_output=True)
    a, b = OUTER[4]
    uat = (f'uat:esp_sa:"IPv4","{a}","{b}","0x00001001","{alg.tshark_enc}","0x{alg.enc_key.hex()}",'
           f'"{INTEG[alg.integ][2]}","0x{alg.auth_key.hex()}"')
    r = subprocess.run(["tshark", "-r", str(out), "-o", "esp.enable_encryption_decode:TRUE",
                        "-o", "esp.enable_authentication_check:TRUE", "-o", uat, "-V"],
                       capture_output=True, text=True, check=True, timeout=120)
    text = r.stdout
    assert len(re.findall(r"\[Good: True\]", text)) == len(plain), text[-3000:]
    assert "[Bad: True]" not in text
    for i in range(5):
        assert f"Destination Port: {7000 + i}" in text


# --- configuration: key lengths, legacy and NULL switches -------------------------------

def pcap_args(espgw, cfg, tmp_path, extra=()):
    inp = tmp_path / "empty.pcap"
    wrpcap(str(inp), [ether(IP(src="198.51.100.1", dst="203.0.113.1") / UDP())])
    return [str(espgw), *extra, "pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound",
            "--input", str(inp), "--output", str(tmp_path / "o.pcap")]


@pytest.mark.parametrize("alg", ALGS, ids=lambda a: a.name)
def test_wrong_key_length_names_file_line_and_field(espgw, tmp_path, alg):
    cfg = write_config(tmp_path / "gw.toml", alg, "out", "ipv4-tunnel", 4, False, 0x1001)
    text = cfg.read_text()
    field = "key" if alg.aead else ("cipher_key" if alg.enc_key else "integrity_key")
    old = alg.enc_key if field != "integrity_key" else alg.auth_key
    text = text.replace(f'{field} = "0x{old.hex()}"', f'{field} = "0x{old[:-1].hex()}"')
    cfg.write_text(text)
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if l.startswith(f"{field} ="))
    r = subprocess.run(pcap_args(espgw, cfg, tmp_path, LEGACY), capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{cfg}:{line}: {field}:" in r.stderr, r.stderr


@pytest.mark.parametrize("alg", [a for a in ALGS if a.legacy], ids=lambda a: a.name)
def test_legacy_algorithms_need_the_switch(espgw, tmp_path, alg):
    cfg = write_config(tmp_path / "gw.toml", alg, "out", "ipv4-tunnel", 4, False, 0x1001)
    r = subprocess.run(pcap_args(espgw, cfg, tmp_path), capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{cfg}:1: algorithm:" in r.stderr and "--allow-legacy-crypto" in r.stderr, r.stderr
    r = subprocess.run(pcap_args(espgw, cfg, tmp_path, LEGACY), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stderr and "deprecated by RFC 8221" in r.stderr


def test_null_null_needs_its_switch(espgw, tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text("\n".join([
        "[[sa]]", 'direction = "out"', "spi = 0x107", 'mode = "ipv4-tunnel"', 'local = "192.0.2.1"',
        'remote = "192.0.2.2"', 'cipher = "null"', 'integrity = "null"', "",
        "[[policy]]", 'direction = "out"', 'dst = "0.0.0.0/0"', 'action = "protect"', "sa = 0x107", "",
        "[[route]]", 'dst = "0.0.0.0/0"', "port = 1", ""]))
    r = subprocess.run(pcap_args(espgw, cfg, tmp_path), capture_output=True, text=True)
    assert r.returncode != 0 and "--allow-null-null" in r.stderr, r.stderr
    r = subprocess.run(pcap_args(espgw, cfg, tmp_path, ["--allow-null-null"]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = list(__import__("scapy.all", fromlist=["rdpcap"]).rdpcap(str(tmp_path / "o.pcap")))
    # NULL/NULL: the inner packet is in the clear right after the 8-byte ESP header.
    esp = raw(out[0][IP].payload)
    assert esp[:4] == struct.pack("!L", 0x107) and esp[8] == 0x45
