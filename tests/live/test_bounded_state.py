"""Bounded state under hostile traffic (issue 17): floods of spoofed ARP requests and
neighbour solicitations for the gateway's own addresses, and of ESP first fragments that
never complete, leave the neighbour cache and the reassembly table at their bounds, the
gateway's memory flat, and legitimate traffic (ping through the tunnel, a fragmented ESP
datagram) flowing."""
import pathlib
import time

from conftest import STATE, nsx, proc_status, show, wait_for
from test_gateway import add_scapy_peer, host_stat, result, scapy, scapy_bg

NEIGHBOUR_LIMIT = 4096  # espgw_core::neighbour::MAX_ENTRIES
REASSEMBLY_LIMIT = 64  # espgw_core::reassembly::MAX_DATAGRAMS (per worker)


def rss_kib(pid):
    return int(proc_status(pid)["VmRSS"].split()[0])


def ping_through(count=3):
    return nsx("h1", "ping", "-c", str(count), "-i", "0.2", "-W", "2", "203.0.113.2",
               check=False)


def dynamic_neighbours():
    return [n for n in show("gw1", "neighbours") if n.get("state") != "static"]


def test_floods_leave_state_bounded_and_traffic_flowing(bed, tmp_path):
    pid = int((STATE / "gw1.pid").read_text())
    assert ping_through().returncode == 0
    rss0 = rss_kib(pid)

    # 6,000 spoofed senders, each with an ARP request and a solicitation (12,000 frames).
    sent = scapy("h1", "neighbour-flood", "6000", timeout=180)
    assert sent["frames"] == 12000
    time.sleep(0.5)
    n = len(dynamic_neighbours())
    assert NEIGHBOUR_LIMIT // 2 < n <= NEIGHBOUR_LIMIT, n
    # h1 may have been evicted as the oldest: the gateway asks again, and traffic flows.
    ping_through(2)
    r = ping_through(5)
    assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout

    # 3,000 datagrams that never complete: each beyond the table's bound evicts the oldest.
    drops0 = show("gw1", "stats")["drops"].get("reassembly", 0)
    assert scapy("wan", "fragment-flood", "3000", timeout=120)["frames"] == 3000
    assert wait_for(lambda: show("gw1", "stats")["drops"].get("reassembly", 0)
                    >= drops0 + 3000 - REASSEMBLY_LIMIT, timeout=5), show("gw1", "stats")
    # An honest fragmented ESP datagram right after the flood is reassembled and delivered.
    add_scapy_peer(tmp_path)
    before = show("gw1", "stats")["host"]["reassembled"]
    rx = scapy_bg("h1", "listen", "7777", "8", "1")
    assert scapy("wan", "esp-in", "3000000", "400", "1")["frames"] == 3
    got = result(rx)
    assert len(got["payloads"]) == 1, got
    assert host_stat("gw1", "reassembled", before + 1) >= before + 1

    # Memory: what the floods left is bounded (the neighbour table at its limit is well
    # under a megabyte; reassembly buffers are 64 x 9 KiB per worker).
    grown = rss_kib(pid) - rss0
    assert grown < 16 * 1024, f"gw1 grew by {grown} KiB"
    print(f"after 12,000 neighbour frames and 3,000 fragments: {n} neighbours, "
          f"RSS +{grown} KiB")
    assert pathlib.Path(f"/proc/{pid}").exists(), "gw1 survived"
