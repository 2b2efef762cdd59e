"""tshark (Wireshark's dissector, an implementation independent of espgw and scapy) decrypts
espgw's ESP given the keys and finds every ICV good."""
import itertools
import re
import shutil
import subprocess

import pytest
from scapy.all import IP, UDP, IPv6, Raw, TCP, wrpcap

from helpers import Gateway, Sa, ether, fresh_state

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

KEYS = {128: bytes(range(16)) + b"\x01\x02\x03\x04",
        192: bytes(range(50, 74)) + b"\x05\x06\x07\x08",
        256: bytes(range(90, 122)) + b"\x09\x0a\x0b\x0c"}
SHAPES = {"v4-in-v4": ("ipv4-tunnel", 4), "v6-in-v6": ("ipv6-tunnel", 6), "v4-in-v6": ("ipv6-tunnel", 4)}


def tshark(pcap, sa, icv):
    local, remote = sa.endpoints()
    fam = "IPv6" if ":" in local else "IPv4"
    uat = (f'uat:esp_sa:"{fam}","{local}","{remote}","0x{sa.spi:08x}",'
           f'"AES-GCM with {icv} octet ICV [RFC4106]","0x{sa.key.hex()}","NULL",""')
    r = subprocess.run(["tshark", "-r", str(pcap), "-o", "esp.enable_encryption_decode:TRUE",
                        "-o", "esp.enable_authentication_check:TRUE", "-o", uat, "-V"],
                       capture_output=True, text=True, check=True, timeout=120)
    return r.stdout


@pytest.mark.parametrize("bits,shape,udp,icv", list(itertools.product(KEYS, SHAPES, [False, True], [16, 12, 8])),
                         ids=lambda v: str(v))
def test_tshark_decrypts_and_verifies(espgw, tmp_path, bits, shape, udp, icv):
    mode, fam = SHAPES[shape]
    sa = Sa(spi=0x1001, direction="out", key=KEYS[bits], mode=mode, udp=udp, icv=icv)
    nets = ("198.51.100.0/24", "203.0.113.0/24") if fam == 4 else ("2001:db8:100::/64", "2001:db8:113::/64")
    gw = Gateway(sas=[sa], policies=[("out", nets[0], nets[1], sa.spi)])
    cfg = gw.write(tmp_path / "gw.toml", "native")
    src, dst = ("198.51.100.10", "203.0.113.20") if fam == 4 else ("2001:db8:100::10", "2001:db8:113::20")
    mk = (lambda: IP(src=src, dst=dst)) if fam == 4 else (lambda: IPv6(src=src, dst=dst))
    plain = [ether(mk() / UDP(sport=1000 + i, dport=7000 + i) / Raw(b"espgw" * i)) for i in range(5)]
    plain += [ether(mk() / TCP(sport=4000, dport=443, flags="S"))]
    inp, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(inp), plain)
    subprocess.run([str(espgw), "pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound",
                    "--input", str(inp), "--output", str(out)], check=True, capture_output=True)
    text = tshark(out, sa, icv)
    good = len(re.findall(r"\[Good: True\]", text))
    assert good == len(plain), text[-3000:]
    assert "[Bad: True]" not in text and "incorrect" not in text
    # The decrypted inner packets are ours: every UDP destination port is there.
    for i in range(5):
        assert f"Destination Port: {7000 + i}" in text


def test_tshark_flags_a_wrong_key(espgw, tmp_path):
    """The check above can fail: with a wrong key tshark reports the ICV as incorrect."""
    sa = Sa(spi=0x1001, direction="out", key=KEYS[128], mode="ipv4-tunnel")
    gw = Gateway(sas=[sa], policies=[("out", "198.51.100.0/24", "203.0.113.0/24", sa.spi)])
    cfg = gw.write(tmp_path / "gw.toml", "native")
    inp, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(inp), [ether(IP(src="198.51.100.1", dst="203.0.113.1") / UDP() / Raw(b"x"))])
    subprocess.run([str(espgw), "pcap", *fresh_state(), "--config", str(cfg), "--direction", "outbound",
                    "--input", str(inp), "--output", str(out)], check=True, capture_output=True)
    wrong = Sa(spi=0x1001, direction="out", key=bytes(20), mode="ipv4-tunnel")
    text = tshark(out, wrong, 16)
    assert "[Good: True]" not in text
    assert "incorrect" in text or "[Bad: True]" in text
