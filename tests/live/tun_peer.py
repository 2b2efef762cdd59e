"""The peer gateway of the TUN test, played by scapy on eth0 (192.0.2.2)."""
import json
import sys

from scapy.all import IP, UDP, Raw, conf, raw, send, sniff
from scapy.layers.ipsec import ESP, SecurityAssociation

conf.verb = 0
OUT = SecurityAssociation(ESP, spi=0x1001, crypt_algo="AES-GCM",
                          crypt_key=bytes(range(16)) + bytes.fromhex("cafe0001"),
                          tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
IN = SecurityAssociation(ESP, spi=0x2001, crypt_algo="AES-GCM",
                         crypt_key=bytes(range(16, 32)) + bytes.fromhex("cafe0002"),
                         tunnel_header=IP(src="192.0.2.2", dst="192.0.2.1"))

if sys.argv[1] == "decrypt":
    # "ready" once the capture is open: the test sends only then (importing scapy alone
    # can take over a second on a loaded machine).
    got = sniff(iface="eth0", timeout=float(sys.argv[2]), count=1,
                lfilter=lambda p: ESP in p and p[ESP].spi == 0x1001,
                started_callback=lambda: print("ready", flush=True))
    clear = OUT.decrypt(got[0][IP]) if got else None
    print(json.dumps(None if clear is None else {
        "inner_src": clear.src, "inner_dst": clear.dst,
        "payload": raw(clear[UDP].payload).decode(errors="replace")}))
elif sys.argv[1] == "send-many":
    # argv[3] packets, sequence numbers from argv[2].
    first, count = int(sys.argv[2]), int(sys.argv[3])
    for i in range(count):
        inner = (IP(src="203.0.113.9", dst="198.51.100.2") / UDP(sport=5555, dport=6666)
                 / Raw(b"to-the-host-%d" % i))
        send(IN.encrypt(inner, seq_num=first + i))
else:
    # "send [SEQ]": one packet, sequence number SEQ (default 1).
    seq = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    inner = IP(src="203.0.113.9", dst="198.51.100.2") / UDP(sport=5555, dport=6666) / Raw(b"to-the-host")
    send(IN.encrypt(inner, seq_num=seq))
