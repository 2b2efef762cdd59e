"""AF_XDP busy polling (`espgw run --busy-poll USECS`): every socket of both gateways has it
set (read back from the kernel into the log), traffic flows through the tunnel as without
it, and a value out of range is refused before anything opens."""
import json
import re

from conftest import ESPGW, LAB, bed_down, bed_up, listening, nsx, nspopen, sh


def test_busy_polling_gateways_forward_and_log_the_setting():
    bed_up("--io", "af-xdp", "--workers", "2", "--run-args=--busy-poll 50 --busy-poll-budget 32")
    try:
        nsx("h1", "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.2")
        rx = listening(nspopen("h2", LAB, "testbed", "udp-recv", "--port", "9300", "--seconds", "4"))
        tx = nspopen("h1", LAB, "testbed", "udp-send", "--dst", "203.0.113.2:9300",
                     "--size", "300", "--seconds", "2", "--rate", "2000")
        tx.communicate(timeout=30)
        got = json.loads(rx.communicate(timeout=30)[0])
        assert got["packets"] >= 3960, got
    finally:
        logs = bed_down()
    for gw in ("gw1", "gw2"):
        events = re.findall(r"event=af_xdp_busy_poll interface=(\S+) queue=(\d+) "
                            r"busy_poll_us=(\d+) budget=(\d+)", logs[gw])
        # Two workers, two queues per interface: a socket each, all with the setting.
        assert sorted((i, q) for i, q, _, _ in events) == [
            ("north", "0"), ("north", "1"), ("south", "0"), ("south", "1")], logs[gw][-2000:]
        assert all((us, b) == ("50", "32") for _, _, us, b in events), events


def test_busy_poll_out_of_range_is_refused():
    r = sh(ESPGW, "run", "--demo", "--busy-poll", "20000", check=False)
    assert r.returncode != 0 and "--busy-poll" in r.stderr, r.stderr
