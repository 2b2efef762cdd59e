"""Scapy helpers run inside test-bed namespaces (python3 scapy_tools.py CMD ...); each
prints one JSON line."""
import json
import sys

from scapy.all import (ARP, ICMP, IP, UDP, Ether, IPv6, Raw, conf, fragment, raw, sendp, sniff,
                       sr1)
from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr
from scapy.layers.inet import IPerror
from scapy.layers.inet6 import ICMPv6PacketTooBig
from scapy.layers.ipsec import ESP, SecurityAssociation

conf.verb = 0
GW1_NORTH_MAC = "02:00:00:00:01:02"
WAN_MAC = "02:00:00:00:0a:0a"
KEYS = {0x1001: bytes(range(16)) + bytes.fromhex("cafe0001"),
        0x2001: bytes(range(16, 32)) + bytes.fromhex("cafe0002"),
        0x3001: bytes(range(32, 48)) + bytes.fromhex("cafe0003")}


def sa(spi, src, dst):
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=KEYS[spi],
                               tunnel_header=IP(src=src, dst=dst))


def pmtu(fam):
    """A 1500-byte packet that cannot cross the tunnel: the ICMP error gw1 sends."""
    if fam == "4":
        p = IP(dst="203.0.113.2", flags="DF") / UDP(sport=4000, dport=9) / Raw(b"x" * 1472)
        r = sr1(p, timeout=3)
        if r is None or ICMP not in r:
            return {"answer": None}
        return {"src": r[IP].src, "type": r[ICMP].type, "code": r[ICMP].code,
                "mtu": r[ICMP].nexthopmtu,
                "quoted_dst": r[IPerror].dst if IPerror in r else None}
    p = IPv6(dst="2001:db8:113::2") / UDP(sport=4000, dport=9) / Raw(b"x" * 1452)
    r = sr1(p, timeout=3)
    if r is None or ICMPv6PacketTooBig not in r:
        return {"answer": None}
    return {"src": r[IPv6].src, "type": r[ICMPv6PacketTooBig].type,
            "mtu": r[ICMPv6PacketTooBig].mtu}


def esp_in(seq, fragsize, count):
    """Sends ESP as a third peer (192.0.2.3, SA 0x3001, inner source 203.0.113.200) to
    gw1, optionally fragmented. (Its own SA: sequence numbers chosen here must not move
    the replay window of gateway 2's SA.)"""
    s = sa(0x3001, "192.0.2.3", "192.0.2.1")
    frames = 0
    for i in range(count):
        inner = (IP(src="203.0.113.200", dst="198.51.100.2") / UDP(sport=7777, dport=7777)
                 / Raw(b"scapy-live-%d:" % i + b"z" * 1000))
        e = s.encrypt(inner, seq_num=seq + i)
        pieces = fragment(e, fragsize=fragsize) if fragsize else [e]
        for f in pieces:
            sendp(Ether(src=WAN_MAC, dst=GW1_NORTH_MAC) / f, iface="br0")
            frames += 1
    return {"frames": frames}


def spoofed_mac(i):
    return "02:5f:%02x:%02x:%02x:%02x" % ((i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255,
                                          i & 255)


def neighbour_flood(count):
    """From h1: `count` ARP requests and `count` neighbour solicitations for gw1's own south
    addresses, each from a different spoofed sender (MAC, and IPv4 in 198.18.0.0/15 or IPv6
    in 2001:db8:100::/64)."""
    frames = []
    for i in range(count):
        mac = spoofed_mac(i)
        frames.append(Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
                      / ARP(op=1, hwsrc=mac, psrc="198.18.%d.%d" % (i // 250, 1 + i % 250),
                            pdst="198.51.100.1"))
        src6 = "2001:db8:100::5f:%x" % (i + 16)
        frames.append(Ether(src=mac, dst="33:33:ff:00:00:01")
                      / IPv6(src=src6, dst="ff02::1:ff00:1", hlim=255)
                      / ICMPv6ND_NS(tgt="2001:db8:100::1") / ICMPv6NDOptSrcLLAddr(lladdr=mac))
    sendp(frames, iface="eth0")
    return {"frames": len(frames)}


def fragment_flood(count):
    """From the transport link: `count` first fragments of ESP datagrams that never
    complete, to gw1, from as many spoofed sources in 198.18.0.0/15."""
    frames = [Ether(src=WAN_MAC, dst=GW1_NORTH_MAC)
              / IP(src="198.18.%d.%d" % (i // 250, 1 + i % 250), dst="192.0.2.1", proto=50,
                   id=i & 0xffff, flags="MF", frag=0) / Raw(b"f" * 512)
              for i in range(count)]
    sendp(frames, iface="br0")
    return {"frames": len(frames)}


def ready():
    """Says on the first line of stdout that the capture runs: the test sends only then (scapy's
    import alone can take seconds on a busy machine, so a fixed wait could miss the packets)."""
    print("ready", flush=True)


def listen(port, timeout, count):
    """Receives UDP datagrams to `port` on eth0."""
    got = sniff(iface="eth0", started_callback=ready, timeout=float(timeout), count=int(count),
                lfilter=lambda p: UDP in p and p[UDP].dport == int(port))
    return {"payloads": [raw(p[UDP].payload)[:20].decode(errors="replace") for p in got],
            "lengths": [len(p[UDP].payload) for p in got]}


def esp_out(timeout):
    """Captures ESP of SA 0x1001 on the transport link and decrypts it with scapy."""
    got = sniff(iface="br0", started_callback=ready, timeout=float(timeout), count=1,
                lfilter=lambda p: ESP in p and p[ESP].spi == 0x1001)
    if not got:
        return {"decrypted": None}
    p = got[0][IP]
    outer, seq = [p.src, p.dst], p[ESP].seq
    clear = sa(0x1001, "192.0.2.1", "192.0.2.2").decrypt(p)
    return {"outer": outer, "seq": seq, "inner_src": clear.src,
            "inner_dst": clear.dst, "payload": raw(clear[UDP].payload).decode(errors="replace")}


def esp_out_all(count, timeout):
    """Captures `count` IP packets of SA 0x1001 on the transport link (ESP or fragments of
    it) and reports each one's outer length and fragment fields, and what scapy decrypts
    from each whole one."""
    got = sniff(iface="br0", started_callback=ready, timeout=float(timeout), count=int(count),
                lfilter=lambda p: IP in p and p[IP].src == "192.0.2.1" and p[IP].proto == 50)
    out = []
    for f in got:
        p = f[IP]
        whole = p.flags.MF == 0 and p.frag == 0
        one = {"len": p.len, "mf": int(p.flags.MF), "frag": p.frag}
        if whole:
            clear = sa(0x1001, "192.0.2.1", "192.0.2.2").decrypt(p)
            one.update(inner_len=clear.len, inner_dst=clear.dst,
                       inner_df=int(clear.flags.DF))
        out.append(one)
    return {"packets": out}


def replay(timeout):
    """Captures one ESP frame of SA 0x2001 going to gw1 and sends it again."""
    got = sniff(iface="br0", started_callback=ready, timeout=float(timeout), count=1,
                lfilter=lambda p: ESP in p and p[ESP].spi == 0x2001)
    if not got:
        return {"replayed": None}
    f = got[0]
    sendp(Ether(src=WAN_MAC, dst=GW1_NORTH_MAC) / f[IP], iface="br0")
    return {"replayed": f[ESP].seq}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "pmtu":
        out = pmtu(args[0])
    elif cmd == "esp-in":
        out = esp_in(int(args[0]), int(args[1]), int(args[2]))
    elif cmd == "listen":
        out = listen(*args)
    elif cmd == "esp-out":
        out = esp_out(args[0])
    elif cmd == "esp-out-all":
        out = esp_out_all(args[0], args[1])
    elif cmd == "replay":
        out = replay(args[0])
    elif cmd == "neighbour-flood":
        out = neighbour_flood(int(args[0]))
    elif cmd == "fragment-flood":
        out = fragment_flood(int(args[0]))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out))
