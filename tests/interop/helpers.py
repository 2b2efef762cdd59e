"""Configuration writers (native TOML, DPDK ipsec-secgw, setkey) and runners for espgw."""
import atexit
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from scapy.all import IP, IPv6, UDP, Ether, raw, rdpcap, wrpcap

SOUTH_V4, NORTH_V4 = "198.51.100.0/24", "203.0.113.0/24"
SOUTH_V6, NORTH_V6 = "2001:db8:100::/64", "2001:db8:113::/64"
OUTER = {4: ("192.0.2.1", "192.0.2.2"), 6: ("2001:db8:2::1", "2001:db8:2::2")}


@dataclass
class Sa:
    spi: int
    direction: str  # "out" or "in"
    key: bytes  # AES key followed by the 4-byte salt
    mode: str  # "ipv4-tunnel", "ipv6-tunnel" or "transport"
    esn: bool = False
    initial_seq: int = 0
    udp: bool = False
    replay_window: int = 1024
    icv: int = 16

    @property
    def alg(self):
        return {20: "aes-128-gcm", 28: "aes-192-gcm", 36: "aes-256-gcm"}[len(self.key)]

    def endpoints(self):
        """(local, remote) of this gateway for the SA."""
        fam = 6 if self.mode == "ipv6-tunnel" else 4
        a, b = OUTER[fam]
        return (a, b) if self.direction == "out" else (b, a)


@dataclass
class Gateway:
    """One gateway: SAs, and policies (direction, src, dst, spi)."""
    sas: list
    policies: list = field(default_factory=list)

    def native(self):
        out = ["burst = 32", ""]
        for s in self.sas:
            out += ["[[sa]]", f'direction = "{s.direction}"', f"spi = {s.spi}", f'mode = "{s.mode}"',
                    f'aead = "{s.alg}"', f'key = "0x{s.key.hex()}"', f"esn = {str(s.esn).lower()}",
                    f"initial_seq = {s.initial_seq}", f"replay_window = {s.replay_window}", f"icv = {s.icv}"]
            if s.mode != "transport":
                local, remote = s.endpoints()
                out += [f'local = "{local}"', f'remote = "{remote}"']
            if s.udp:
                out.append("udp_encap = true")
            out.append("")
        for d, src, dst, spi in self.policies:
            out += ["[[policy]]", f'direction = "{d}"', f'src = "{src}"', f'dst = "{dst}"',
                    'action = "protect"', f"sa = {spi}", ""]
        for dst in ("0.0.0.0/0", "::/0"):
            out += ["[[route]]", f'dst = "{dst}"', "port = 1", ""]
        return "\n".join(out)

    def secgw(self):
        out = ["# DPDK ipsec-secgw syntax"]
        for d, src, dst, spi in self.policies:
            v = "ipv6" if ":" in src else "ipv4"
            out.append(f"sp {v} {d} esp protect {spi} pri 1 src {src} dst {dst} \\")
            out.append("    sport 0:65535 dport 0:65535")
        for s in self.sas:
            key = ":".join(f"{b:02x}" for b in s.key)
            line = f"sa {s.direction} {s.spi} aead_algo {s.alg} aead_key {key} mode {s.mode}"
            if s.mode != "transport":
                local, remote = s.endpoints()
                src, dst = (local, remote) if s.direction == "out" else (remote, local)
                line += f" \\\n    src {src} dst {dst}"
            if s.esn:
                # ipsec-secgw's `esn N`: the first number sent outbound, the window's top
                # inbound (crates/config/src/secgw/sa.rs, `initial_seq`).
                line += f" esn {s.initial_seq + 1 if s.direction == 'out' else s.initial_seq}"
            if s.udp:
                line += " udp-encap"
            out.append(line)
        out.append("rt ipv4 dst 0.0.0.0/0 port 1")
        out.append("rt ipv6 dst ::/0 port 1")
        return "\n".join(out) + "\n"

    def setkey(self):
        assert all(not s.esn for s in self.sas), "setkey has no ESN syntax"
        out = ["#!/usr/sbin/setkey -f", "flush;", "spdflush;"]
        for s in self.sas:
            local, remote = s.endpoints() if s.mode != "transport" else self._transport_hosts(s)
            src, dst = (local, remote) if s.direction == "out" else (remote, local)
            proto = "esp-udp" if s.udp else "esp"
            if s.udp:
                src, dst = f"{src}[4500]", f"{dst}[4500]"
            mode = "tunnel" if s.mode != "transport" else "transport"
            out.append(f"add {src} {dst} {proto} 0x{s.spi:x} -m {mode} -r {s.replay_window}")
            out.append(f"    -E aes-gcm-16 0x{s.key.hex()};")
        for d, psrc, pdst, spi in self.policies:
            s = next(x for x in self.sas if x.spi == spi and x.direction == d)
            if s.mode == "transport":
                rule = "esp/transport//require"
            else:
                local, remote = s.endpoints()
                a, b = (local, remote) if d == "out" else (remote, local)
                rule = f"esp/tunnel/{a}-{b}/require"
            out.append(f"spdadd {psrc} {pdst} any -P {d} ipsec {rule};")
        return "\n".join(out) + "\n"

    def _transport_hosts(self, s):
        # Transport policies here name single hosts: the SA joins them.
        d, src, dst, _ = next(p for p in self.policies if p[3] == s.spi and p[0] == s.direction)
        src, dst = src.split("/")[0], dst.split("/")[0]
        return (src, dst) if s.direction == "out" else (dst, src)

    def write(self, path, fmt):
        text = {"native": self.native, "secgw": self.secgw, "setkey": self.setkey}[fmt]()
        path.write_text(text)
        return path



# Every `espgw pcap` run of these tests starts from an empty sequence state, as a first
# start with a new key does: its SAs begin at their configured numbers, which the known
# answers expect. (tests/interop/test_sequence_state.py tests the persistence itself.)
_STATE_ROOT = tempfile.mkdtemp(prefix="espgw-interop-state-")
atexit.register(shutil.rmtree, _STATE_ROOT, True)


def fresh_state():
    """`--state-dir` and a new, empty state directory."""
    return ["--state-dir", tempfile.mkdtemp(dir=_STATE_ROOT)]


def run_pcap(espgw, cfg, direction, packets, tmp, json_out=True, extra=()):
    """Runs frames through `espgw pcap` (with `extra` options); returns (output frames,
    counters)."""
    inp, out = tmp / f"in-{direction}.pcap", tmp / f"out-{direction}.pcap"
    wrpcap(str(inp), packets)
    args = [str(espgw), "pcap", *fresh_state(), *extra, "--config", str(cfg), "--direction",
            direction, "--input", str(inp), "--output", str(out)]
    if json_out:
        args.append("--json")
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    counters = json.loads(r.stdout) if json_out else r.stdout
    return list(rdpcap(str(out))), counters


def l3(pkt):
    """The IP layer of a frame as bytes."""
    return raw(pkt[IP] if IP in pkt else pkt[IPv6])


def ether(ip_pkt):
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:01:01") / ip_pkt
