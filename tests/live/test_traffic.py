"""Traffic through the live espgw pair on both back-ends: ping and iperf3 (TCP and UDP),
IPv4 and IPv6, both directions; the transport link carries only ESP, and tshark decrypts
it with the configured keys."""
import json
import subprocess
import time

import pytest

from conftest import (GW1_TO_GW2, GW2_TO_GW1, bed_down, bed_up, nsx, nspopen, sh,
                      show, start_capture)

ADDR = {("h1", 4): "198.51.100.2", ("h2", 4): "203.0.113.2",
        ("h1", 6): "2001:db8:100::2", ("h2", 6): "2001:db8:113::2"}


@pytest.fixture(scope="module", params=["af-xdp", "af-packet"])
def io_bed(request):
    bed_up("--io", request.param)
    kinds = {p["io"] for p in show("gw1", "ports")} | {p["io"] for p in show("gw2", "ports")}
    assert kinds == {request.param.replace("-", "_")}, kinds
    yield request.param
    bed_down()


@pytest.mark.parametrize("fam", [4, 6])
@pytest.mark.parametrize("src,dst", [("h1", "h2"), ("h2", "h1")])
def test_ping(io_bed, fam, src, dst):
    r = nsx(src, "ping", f"-{fam}", "-c", "3", "-i", "0.2", "-W", "2", ADDR[(dst, fam)],
            check=False)
    assert " 3 received" in r.stdout, r.stdout + r.stderr


def iperf(src, dst, fam, udp, reverse=False):
    """One iperf3 run; a client that hangs past its timeout is run once more. iperf3's
    end-of-test exchange hung once in CI (UDP over AF_XDP, IPv6: no output for 30 s) and
    passed 48 of 48 reruns; a second hang still fails the test."""
    try:
        return iperf_once(src, dst, fam, udp, reverse)
    except subprocess.TimeoutExpired:
        return iperf_once(src, dst, fam, udp, reverse)


def iperf_once(src, dst, fam, udp, reverse):
    server = nspopen(dst, "iperf3", "-s", "-1", "-p", "5201")
    time.sleep(0.3)
    try:
        args = ["iperf3", "-c", ADDR[(dst, fam)], "-p", "5201", "-t", "2", "-J"]
        if udp:
            args += ["-u", "-b", "40M", "-l", "1200"]
        if reverse:
            args.append("-R")
        r = nsx(src, *args, check=False, timeout=30)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr
        return json.loads(r.stdout)
    finally:
        try:
            server.wait(timeout=10)
        except Exception:
            server.kill()


@pytest.mark.parametrize("fam", [4, 6])
@pytest.mark.parametrize("reverse", [False, True], ids=["h1-to-h2", "h2-to-h1"])
def test_iperf3_tcp(io_bed, fam, reverse):
    j = iperf("h1", "h2", fam, udp=False, reverse=reverse)
    bps = j["end"]["sum_received"]["bits_per_second"]
    assert bps > 10e6, f"TCP through the tunnel: {bps / 1e6:.1f} Mbit/s"


def gateway_drops():
    """Every drop the two gateways counted: by reason in the pipeline, and at their ports
    (receive ring full, transmit refused)."""
    total = 0
    for gw in ("gw1", "gw2"):
        total += sum(show(gw, "stats")["drops"].values())
        total += sum(p["rx_dropped"] + p["tx_dropped"] for p in show(gw, "ports"))
    return total


@pytest.mark.parametrize("fam", [4, 6])
@pytest.mark.parametrize("reverse", [False, True], ids=["h1-to-h2", "h2-to-h1"])
def test_iperf3_udp(io_bed, fam, reverse):
    """40 Mbit/s is far below what the pair forwards: loss means a bug, not a limit. A
    run that loses 1 % or more while neither gateway counted a drop runs once more: on
    the shared 2-core VM such runs came and went with the build that had passed CI as well
    (2026-11-25: 1.6-3.3 % lost, over AF_XDP, in 4 of 18 runs of these tests with either
    build; none in 24 iperf3 runs on a bed already up), and a second one still fails. Loss
    the gateways counted fails at once."""
    for attempt in (1, 2):
        drops = gateway_drops()
        j = iperf("h1", "h2", fam, udp=True, reverse=reverse)
        s = j["end"]["sum"]
        assert s["packets"] > 1000, s
        counted = gateway_drops() - drops
        if s["lost_percent"] < 1.0:
            return
        assert counted == 0, f"the gateways dropped {counted}: {s}"
        assert attempt == 1, s


def tshark_uat(sa, src, dst):
    return (f'uat:esp_sa:"IPv4","{src}","{dst}","0x{sa["spi"]:08x}",'
            f'"AES-GCM with 16 octet ICV [RFC4106]","0x{sa["key"].hex()}","NULL",""')


def test_transport_link_carries_only_esp_and_tshark_decrypts(io_bed, tmp_path):
    cap = tmp_path / "wan.pcap"
    # Capture on the transport bridge while both directions carry traffic.
    dump = start_capture("espgw-wan", "br0", cap, 6)
    nsx("h1", "ping", "-c", "5", "-i", "0.2", ADDR[("h2", 4)])
    nsx("h2", "ping", "-6", "-c", "5", "-i", "0.2", ADDR[("h1", 6)])
    dump.wait(timeout=30)
    # Every IP frame on the wire is ESP.
    r = sh("tshark", "-r", cap, "-T", "fields", "-e", "frame.protocols")
    protos = [l for l in r.stdout.splitlines() if l.strip()]
    ip_frames = [p for p in protos if ":ip" in p]
    assert len(ip_frames) >= 20, protos
    not_esp = [p for p in ip_frames if ":esp" not in p]
    assert not not_esp, f"plaintext on the transport link: {not_esp[:5]}"
    # tshark decrypts with the configured keys, verifies the ICVs and finds the pings.
    r = sh("tshark", "-r", cap, "-o", "esp.enable_encryption_decode:TRUE",
           "-o", "esp.enable_authentication_check:TRUE",
           "-o", tshark_uat(GW1_TO_GW2, "192.0.2.1", "192.0.2.2"),
           "-o", tshark_uat(GW2_TO_GW1, "192.0.2.2", "192.0.2.1"),
           "-T", "fields", "-e", "esp.spi", "-e", "icmp.type", "-e", "icmpv6.type",
           "-e", "esp.icv_good")
    rows = [l.split("\t") for l in r.stdout.splitlines() if l.strip()]
    assert rows and all(row[3] == "1" for row in rows), rows[:5]
    v4_requests = [row for row in rows if row[1] == "8"]
    v6_requests = [row for row in rows if row[2] == "128"]
    assert len(v4_requests) == 5 and len(v6_requests) == 5, rows
    assert {row[0] for row in v4_requests} == {"0x00001001"}
    assert {row[0] for row in v6_requests} == {"0x00002001"}
