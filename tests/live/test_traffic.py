"""Traffic through the live espgw pair on both back-ends: ping and iperf3 (TCP and UDP),
IPv4 and IPv6, both directions; the transport link carries only ESP, and tshark decrypts
it with the configured keys."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import (GW1_TO_GW2, GW2_TO_GW1, STATE, bed_down, bed_up, metrics, nsx,
                      nspopen, sh, show, start_capture, wait_for)

ADDR = {("h1", 4): "198.51.100.2", ("h2", 4): "203.0.113.2",
        ("h1", 6): "2001:db8:100::2", ("h2", 6): "2001:db8:113::2"}


@pytest.fixture(scope="module", params=["af-xdp", "af-packet"])
def io_bed(request):
    bed_up("--io", request.param)
    kinds = {p["io"] for p in show("gw1", "ports")} | {p["io"] for p in show("gw2", "ports")}
    assert kinds == {request.param.replace("-", "_")}, kinds
    if request.param == "af-xdp":
        # One worker on a veth: `--xdp-mode auto` takes generic XDP (faster there).
        for g in ("gw1", "gw2"):
            log = (STATE / f"{g}.log").read_text()
            for dev in ("south", "north"):
                assert f"event=af_xdp_mode interface={dev} mode=generic" in log, log
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
            # A 2 MiB socket buffer at the receiving iperf3 (the default 208 KiB holds
            # about 50 ms of this stream) rides out its waits for a core on the 2-core VM.
            args += ["-u", "-b", "40M", "-l", "1200", "-w", "2M"]
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


def frames_in():
    """Per gateway port: (frames its interface received, frames the port took in or
    counted as dropped: received, dropped before the gateway saw them, other hosts', other
    VLANs')."""
    out = {}
    for gw in ("gw1", "gw2"):
        links = {l["ifname"]: l["stats64"]["rx"]["packets"]
                 for l in json.loads(nsx(gw, "ip", "-s", "-j", "link").stdout)}
        for p in show(gw, "ports"):
            out[(gw, p["name"])] = (links[p["interface"]],
                                    p["rx_packets"] + p["rx_dropped"] + p["rx_other_host"]
                                    + p["rx_vlan_tagged"])
    return out


def test_every_frame_received_is_counted(io_bed):
    """Every frame a gateway's interface received reached the gateway or was counted as
    dropped at its port, through full-speed TCP both ways. An AF_XDP receive path that took
    frames from the kernel's ring while the fill ring looked full skipped them: lost without
    a count (and their UMEM frames with them). Before the fix (2026-11-25) every test bed
    had such a moment in its TCP runs: 1-46 frames at a time."""
    before = quiet_frames_in()
    for fam in (4, 6):
        for reverse in (False, True):
            iperf("h1", "h2", fam, udp=False, reverse=reverse)

    grown = settled_growth(before)
    assert grown, {k: (v[0] - before[k][0], v[1] - before[k][1]) for k, v in frames_in().items()}
    assert all(a > 1000 for a, _ in grown.values()), grown


def quiet_frames_in():
    """frames_in() once nothing moved for 0.3 s. The gateways' counters are totals their
    workers publish every housekeeping round, so a snapshot taken while a frame is on its
    way counts it at the interface but not yet at the port (a difference of one frame in
    later growth, seen in 6 of 8 early runs of these tests)."""
    prev = frames_in()
    for _ in range(20):
        time.sleep(0.3)
        now = frames_in()
        if now == prev:
            return now
        prev = now
    return prev


def settled_growth(before):
    """frames_in()'s growth since `before` once both sides agree (the gateways' counters
    are totals the workers report now and then), else None after 5 s."""
    def grown():
        now = frames_in()
        g = {k: (now[k][0] - before[k][0], now[k][1] - before[k][1]) for k in now}
        return g if all(a == b for a, b in g.values()) else None
    return wait_for(grown, timeout=5.0, step=0.25)


def test_ring_overrun_is_counted(io_bed):
    """A gateway that does not take frames in time loses them at its receive ring, and
    says so: gw1 stopped (SIGSTOP) while h1 sends 12,000 datagrams, more than the ring holds
    (2,048 frames on AF_XDP, 4,096 on AF_PACKET with the default --ring-frames); then every
    frame its south interface received was taken in or counted, the drops as ring overruns
    (`rx_ring_full` in `show ports` and /metrics, within `rx_dropped`) and nothing else."""
    # A fresh neighbour entry for gw1 on h1, so that h1 sends while gw1 cannot answer.
    nsx("h1", "ping", "-c", "1", "-W", "2", ADDR[("h2", 4)], check=False)
    ports = lambda: {p["name"]: p for p in show("gw1", "ports")}  # noqa: E731
    before = quiet_frames_in()
    before_ports = ports()
    pid = int((STATE / "gw1.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        code = ("import socket\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for _ in range(12000):\n"
                f"    s.sendto(bytes(64), ('{ADDR[('h2', 4)]}', 9))\n")
        nsx("h1", "/usr/bin/python3", "-c", code)
        time.sleep(0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
    grown = settled_growth(before)
    assert grown, {k: (v[0] - before[k][0], v[1] - before[k][1]) for k, v in frames_in().items()}
    south = ports()["south"]
    dropped = south["rx_dropped"] - before_ports["south"]["rx_dropped"]
    overrun = south["rx_ring_full"] - before_ports["south"]["rx_ring_full"]
    arrived = grown[("gw1", "south")][0]
    assert arrived > 10000, grown
    # At most a ring's worth was taken in; the rest was counted as an overrun, and nothing
    # else was dropped (frames_in: arrived == taken in + dropped).
    assert overrun >= arrived - 4096, (arrived, overrun, dropped)
    assert dropped == overrun, (dropped, overrun)
    m = metrics("gw1")
    assert m['espgw_port_rx_ring_full_total{port="south",interface="' + south["interface"]
             + '"}'] == south["rx_ring_full"], m


def udp_buffer_overflows(ns):
    """Datagrams the host's kernel dropped for a full socket receive buffer (IPv4 and
    IPv6): the receiving application's loss, not the path's."""
    text = nsx(ns, "cat", "/proc/net/snmp", "/proc/net/snmp6").stdout.splitlines()
    udp = [line.split() for line in text if line.startswith("Udp:")]
    v4 = int(dict(zip(udp[0][1:], udp[1][1:]))["RcvbufErrors"])
    v6 = next(int(line.split()[1]) for line in text if line.startswith("Udp6RcvbufErrors"))
    return v4 + v6


def link_drops():
    """Every interface's receive and transmit drops on the path, by namespace."""
    out = {}
    for ns in ("h1", "gw1", "wan", "gw2", "h2"):
        for link in json.loads(nsx(ns, "ip", "-s", "-j", "link").stdout):
            st = link["stats64"]
            out[(ns, link["ifname"])] = (st["rx"]["dropped"], st["tx"]["dropped"])
    return out


@pytest.mark.parametrize("fam", [4, 6])
@pytest.mark.parametrize("reverse", [False, True], ids=["h1-to-h2", "h2-to-h1"])
def test_iperf3_udp(io_bed, fam, reverse):
    """40 Mbit/s is far below what the pair forwards: loss on the path means a bug, not a
    limit. Runs that lost 1-3 % over AF_XDP with no count anywhere were the receive path's
    skipped frames, which test_every_frame_received_is_counted now catches. What the
    receiving host's own socket buffer drops is the receiving iperf3's loss (it waited for a
    core): counted by that host's kernel, it is taken off (2026-11-25, with the fix: 2 of 32
    runs lost 6 and 2 datagrams that way, every interface on the path even)."""
    receiver = "h1" if reverse else "h2"
    drops, overflows, links = gateway_drops(), udp_buffer_overflows(receiver), link_drops()
    j = iperf("h1", "h2", fam, udp=True, reverse=reverse)
    s = j["end"]["sum"]
    assert s["packets"] > 1000, s
    counted = gateway_drops() - drops
    overflowed = udp_buffer_overflows(receiver) - overflows
    lost_on_path = s["lost_packets"] - overflowed
    if lost_on_path >= 0.01 * s["packets"]:
        now = link_drops()
        grown = {k: (v[0] - links[k][0], v[1] - links[k][1]) for k, v in now.items()
                 if k in links and v != links[k]}
        pytest.fail(f"{s}; the gateways counted {counted} drops, {receiver}'s socket buffer "
                    f"{overflowed}, interfaces (rx, tx dropped): {grown}")


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
