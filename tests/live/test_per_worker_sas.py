"""Per-worker SAs (RFC 9611's per-resource child SAs, configured statically): gw1's outbound
IPv4 policy names two ESP SAs, `per_worker_sas = [...]`, and its two workers (flows spread by
hash) each seal with their own, so one policy's traffic uses both workers without sharing a
sequence counter. gw2's inbound policy accepts either SA. Checked on the transport link by
scapy with the keys of the configuration: both SPIs carry traffic, every packet decrypts
under its SPI's key to a datagram that was sent, each flow stays on one SA, each SA's
numbers start at 1 and never repeat; gw2 forwards every datagram and drops nothing."""
import collections
import json

import pytest
from scapy.all import IP, UDP, Raw, rdpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

from conftest import (ESPGW, LAB, STATE, bed_down, bed_up, listening, nsx, nspopen, sh, show,
                      start_capture, wait_for)

KEYS = {0x1001: bytes(range(16)) + bytes.fromhex("cafe0001"),
        0x1002: bytes(range(64, 80)) + bytes.fromhex("cafe0004")}
SECOND_SA = """
[[sa]]
name = "gw1-to-gw2-b"
direction = "{dir}"
spi = 0x00001002
mode = "ipv4-tunnel"
local = "{local}"
remote = "{remote}"
aead = "aes-128-gcm"
key = "0x{key}"
replay_window = 1024
"""
# Enough flows that the flow hash gives each worker some: each flow's source port is the
# kernel's pick, so all on one worker has p = 2^-(FLOWS - 1). With 12 that happened once in
# CI (per_worker_rx [11988, 4]); 24 at half the rate carry the same load with p = 2^-23.
FLOWS = 24
RATE = 250


def with_second_sa(base, direction, local, remote):
    """`base` with the second SA, and the IPv4 policy from 198.51.100.0/24 to
    203.0.113.0/24 naming both SAs instead of the first."""
    one = ('src = "198.51.100.0/24"\ndst = "203.0.113.0/24"\naction = "protect"\n'
           'sa = "gw1-to-gw2"')
    assert base.count(one) == 1, base
    both = one.replace('sa = "gw1-to-gw2"', 'per_worker_sas = ["gw1-to-gw2", "gw1-to-gw2-b"]')
    sa = SECOND_SA.format(dir=direction, local=local, remote=remote, key=KEYS[0x1002].hex())
    first_policy = base.index("[[policy]]")
    return base[:first_policy] + sa.lstrip() + "\n" + base[first_policy:].replace(one, both)


# The two ways to get such a set: the configurations written out above, and the test bed's
# `--per-worker-sas`, which derives the sibling from the built-in SA (SPI with the worker's
# index in its third byte, every key byte XORed with it; crates/lab/src/testbed/per_worker.rs).
GENERATED_KEYS = {0x1001: KEYS[0x1001],
                  0x11001: bytes(b ^ 1 for b in KEYS[0x1001])}


@pytest.fixture(scope="module", params=["configured", "generated"])
def per_worker_bed(request, tmp_path_factory):
    """(SPI -> key, the second SA's name at gw2) of the bed brought up."""
    # Pinned, as in test_workers.py: a worker that migrated between cores would hand its
    # frames to the other core's veth backlog, and the kernel would reorder them.
    common = ("--io", "af-packet", "--workers", "2", "--fanout", "hash", "--run-args=--pin")
    if request.param == "configured":
        d = tmp_path_factory.mktemp("per-worker")
        gw1, gw2 = d / "gw1.toml", d / "gw2.toml"
        gw1.write_text(with_second_sa(sh(ESPGW, "default-config").stdout, "out",
                                      "192.0.2.1", "192.0.2.2"))
        gw2.write_text(with_second_sa(sh(ESPGW, "default-config", "--peer").stdout, "in",
                                      "192.0.2.2", "192.0.2.1"))
        bed_up(*common, "--gw1-config", str(gw1), "--gw2-config", str(gw2))
        yield KEYS, "gw1-to-gw2-b"
    else:
        bed_up(*common, "--per-worker-sas")
        yield GENERATED_KEYS, "gw1-to-gw2-w1"
    bed_down()


def test_each_worker_seals_with_its_own_sa_and_the_peer_takes_both(per_worker_bed, tmp_path):
    keys, second = per_worker_bed
    second_spi = f"0x{max(keys):08x}"
    policies = show("gw1", "policies")
    assert any("per worker" in p["action"] and second_spi in p["action"] for p in policies), \
        policies
    nsx("h1", "ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.2")
    cap = tmp_path / "wan.pcap"
    dump = start_capture("espgw-wan", "br0", cap, 5, bpf="esp")
    rx = [listening(nspopen("h2", LAB, "testbed", "udp-recv", "--port", 9300 + i,
                            "--seconds", "6")) for i in range(FLOWS)]
    tx = [nspopen("h1", LAB, "testbed", "udp-send", "--dst", f"203.0.113.2:{9300 + i}",
                  "--size", "100", "--seconds", "2", "--rate", str(RATE)) for i in range(FLOWS)]
    sent = [json.loads(p.communicate(timeout=30)[0]) for p in tx]
    received = [json.loads(p.communicate(timeout=30)[0]) for p in rx]
    dump.wait(timeout=30)
    per_worker = show("gw1", "stats")["per_worker_rx"]
    assert min(per_worker) > 200, per_worker

    sas = {spi: SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=key,
                                    tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
           for spi, key in keys.items()}
    seqs = collections.defaultdict(list)
    spis_of_flow = collections.defaultdict(set)
    for f in rdpcap(str(cap)):
        if IP not in f or ESP not in f[IP] or f[IP].src != "192.0.2.1":
            continue
        esp = f[IP][ESP]
        assert esp.spi in sas, hex(esp.spi)
        inner = sas[esp.spi].decrypt(f[IP])
        assert inner[IP].src == "198.51.100.2" and inner[IP].dst == "203.0.113.2", inner.summary()
        port = inner[UDP].dport if UDP in inner else None
        if port is not None and 9300 <= port < 9300 + FLOWS:
            assert len(inner[Raw].load) == 100, len(inner[Raw].load)
            spis_of_flow[port].add(esp.spi)
        seqs[esp.spi].append(esp.seq)
    # Both SAs carried traffic, each with sequence numbers of its own: none twice, none
    # skipped, from 1 (or 3, for the SA that carried the two pings before the capture).
    assert set(seqs) == set(keys), {hex(s): len(v) for s, v in seqs.items()}
    for spi, v in seqs.items():
        assert len(v) > 200, (hex(spi), len(v))
        assert min(v) in (1, 3), (hex(spi), min(v))
        assert len(set(v)) == len(v), f"SA {spi:#x} used a sequence number twice"
        assert sorted(v) == list(range(min(v), min(v) + len(v))), f"SA {spi:#x}: gaps"
    # A flow is one worker's (hash fanout), so it keeps to one SA.
    assert len(spis_of_flow) == FLOWS, sorted(spis_of_flow)
    assert all(len(s) == 1 for s in spis_of_flow.values()), spis_of_flow
    # gw2 accepted both SAs' packets under its inbound policy's set, and the datagrams
    # arrived (a frame may still be lost in the kernel on two busy cores: 0.1 % at most).
    total = sum(s["sent"] for s in sent)
    assert sum(r["packets"] for r in received) >= total - total // 1000, (received, sent)
    drops = show("gw2", "stats")["drops"]
    for reason in ("policy_mismatch", "no_sa", "auth_failed", "replay"):
        assert drops.get(reason, 0) == 0, drops
    by_name = {s["name"]: s for s in show("gw2", "sa")}
    for name in ("gw1-to-gw2", second):
        assert by_name[name]["packets"] > 200, by_name[name]
        assert not any(by_name[name]["drops"].values()), by_name[name]
