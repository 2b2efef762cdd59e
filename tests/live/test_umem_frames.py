"""AF_XDP UMEM frames sized by the interface's MTU: 2 KiB where a whole frame fits one after
the kernel's 256-byte receive headroom (MTU up to 1774), 4 KiB above that. With the transport
network at MTU 2000 (`testbed up --wan-mtu 2000`) each gateway's north sockets take 4 KiB
frames and its south sockets (MTU 1500) 2 KiB, both logged; full-size packets cross the tunnel
whole through both, and scapy on the transport link decrypts every one. At MTU 1600 the
north sockets take 2 KiB frames and the same traffic crosses (tests/live/test_wan_mtu.py)."""
import json
import re

from conftest import STATE, bed_down, bed_up, nsx, scapy_bg


def umem_frames(log):
    """{(interface, queue): frame bytes} from a gateway's log."""
    found = re.findall(r"event=af_xdp_umem interface=(\S+) queue=(\d+) frames=\d+ "
                       r"frame_bytes=(\d+)", log)
    return {(i, int(q)): int(b) for i, q, b in found}


def cross_whole(count):
    """Sends `count` 1500-byte packets with DF from h1 to h2; returns what scapy decrypted
    from the transport link."""
    cap = scapy_bg("wan", "esp-out-all", str(count), "8")
    r = nsx("h1", "ping", "-M", "do", "-s", "1472", "-c", str(count), "-i", "0.3", "-W", "2",
            "203.0.113.2", check=False)
    assert f" {count} received" in r.stdout, r.stdout
    out, err = cap.communicate(timeout=30)
    assert cap.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])["packets"]


def crossed_with_wan_mtu(mtu, count):
    """The test bed on AF_XDP with its transport network at `mtu`: what scapy decrypted of
    `count` full-size packets (see `cross_whole`), and both gateways' logs."""
    bed_up("--io", "af-xdp", "--wan-mtu", str(mtu))
    try:
        got = cross_whole(count)
        logs = {g: (STATE / f"{g}.log").read_text() for g in ("gw1", "gw2")}
    finally:
        bed_down()
    return got, logs


def test_frames_follow_each_interfaces_mtu():
    got, logs = crossed_with_wan_mtu(2000, 3)
    # 1556-byte ESP packets (a 1500-byte packet in AES-GCM, outer IPv4), whole, each
    # decrypted to its 1500-byte packet: sent from gw1's 4 KiB frames and received into
    # gw2's, and the replies the same way back.
    assert len(got) == 3, got
    assert all((p["len"], p["mf"], p["inner_len"]) == (1556, 0, 1500) for p in got), got
    for gw, log in logs.items():
        frames = umem_frames(log)
        assert frames == {("north", 0): 4096, ("south", 0): 2048}, (gw, log[-2000:])


def test_a_1600_byte_backhaul_takes_two_kib_frames():
    got, logs = crossed_with_wan_mtu(1600, 2)
    assert len(got) == 2 and all(p["len"] == 1556 for p in got), got
    for gw, log in logs.items():
        assert umem_frames(log) == {("north", 0): 2048, ("south", 0): 2048}, (gw, log[-2000:])
