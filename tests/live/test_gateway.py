"""The live gateway as a network citizen and an operable service: ARP and neighbour
discovery, ping to its own addresses, MTU handling (ICMP errors, fragmentation before
encryption, reassembly of fragmented ESP), live ESP interop with scapy in both
directions, metrics (a replayed packet counted), and hitless reload."""
import json
import pathlib
import time

from conftest import (LAB, ESPGW, GATEWAY_USER, SCAPY_TOOLS, STATE, assert_confined, gateway_file,
                      metrics, nsx, listening, nspopen, scapy_bg, sh, show, wait_for)


def host_stat(gw, name, at_least):
    """A host counter of `gw` once it reached `at_least` (counters are published every
    50 ms), or its value after 3 s."""
    get = lambda: show(gw, "stats")["host"][name]
    return wait_for(lambda: get() if get() >= at_least else None, timeout=3) or get()


def scapy(ns, *args, timeout=60):
    r = nsx(ns, "/usr/bin/python3", SCAPY_TOOLS, *args, timeout=timeout)
    return json.loads(r.stdout.strip().splitlines()[-1])


def result(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_arp_and_nd_resolution(bed):
    nsx("h1", "ping", "-c", "2", "-i", "0.2", "203.0.113.2")
    nsx("h1", "ping", "-6", "-c", "2", "-i", "0.2", "2001:db8:113::2")
    # The hosts learned the gateway's MACs by ARP / ND ...
    n4 = nsx("h1", "ip", "neigh", "show", "198.51.100.1").stdout
    n6 = nsx("h1", "ip", "-6", "neigh", "show", "2001:db8:100::1").stdout
    assert "02:00:00:00:01:01" in n4 and "02:00:00:00:01:01" in n6, (n4, n6)
    # ... and the gateways resolved their next hops themselves (no static entries).
    gw1 = {n["address"]: n for n in show("gw1", "neighbours")}
    assert gw1["198.51.100.2"]["mac"] == "02:00:00:00:00:01"
    assert gw1["2001:db8:100::2"]["mac"] == "02:00:00:00:00:01"
    assert gw1["192.0.2.2"]["mac"] == "02:00:00:00:02:02"
    assert all(n["state"] != "static" for n in gw1.values())
    gw2 = {n["address"]: n for n in show("gw2", "neighbours")}
    assert gw2["203.0.113.2"]["mac"] == "02:00:00:00:00:02"
    assert gw2["192.0.2.1"]["mac"] == "02:00:00:00:01:02"
    host_stat("gw1", "solicitations_sent", 1)
    st = show("gw1", "stats")["host"]
    assert st["arp_replies"] >= 1 and st["nd_replies"] >= 1 and st["solicitations_sent"] >= 1


def test_ping_the_gateways_own_addresses(bed):
    for addr in ("198.51.100.1", "2001:db8:100::1"):
        r = nsx("h1", "ping", "-c", "2", "-i", "0.2", "-W", "2", addr, check=False)
        assert " 2 received" in r.stdout, r.stdout
    r = nsx("h2", "ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.1", check=False)
    assert " 2 received" in r.stdout, r.stdout
    assert host_stat("gw1", "echo_replies", 4) >= 4


def test_time_exceeded(bed):
    # TTL 1 / hop limit 1 on arrival: the gateway answers from its own address.
    r = nsx("h1", "ping", "-t", "1", "-c", "1", "-W", "2", "203.0.113.2", check=False)
    assert "From 198.51.100.1" in r.stdout and "Time to live exceeded" in r.stdout, r.stdout
    r = nsx("h1", "ping", "-6", "-t", "1", "-c", "1", "-W", "2", "2001:db8:113::2", check=False)
    assert "From 2001:db8:100::1" in r.stdout and "Time exceeded" in r.stdout, r.stdout
    assert wait_for(lambda: show("gw1", "stats")["drops"].get("ttl_exceeded", 0) >= 2, timeout=3)


def test_oversized_without_df_is_fragmented_and_delivered(bed):
    before = show("gw1", "stats")["host"]["fragmented"]
    nsx("h1", "ip", "route", "flush", "cache")
    # 1500-byte IP packets, DF clear: too big for the tunnel (1446 fits) once encrypted.
    r = nsx("h1", "ping", "-M", "dont", "-s", "1472", "-c", "3", "-i", "0.3", "-W", "2",
            "203.0.113.2", check=False)
    assert " 3 received" in r.stdout, r.stdout
    assert host_stat("gw1", "fragmented", before + 3) >= before + 3


def test_icmp_fragmentation_needed_and_packet_too_big(bed):
    v4 = scapy("h1", "pmtu", "4")
    assert (v4["type"], v4["code"], v4["mtu"]) == (3, 4, 1446), v4
    assert v4["src"] == "198.51.100.1" and v4["quoted_dst"] == "203.0.113.2"
    v6 = scapy("h1", "pmtu", "6")
    assert (v6["type"], v6["mtu"]) == (2, 1446), v6
    assert v6["src"] == "2001:db8:100::1"
    nsx("h1", "ip", "route", "flush", "cache")
    assert wait_for(lambda: show("gw1", "stats")["drops"].get("mtu", 0) >= 2, timeout=3)


SCAPY_PEER = """
[[sa]]
name = "scapy-to-gw1"
direction = "in"
spi = 0x00003001
mode = "ipv4-tunnel"
local = "192.0.2.1"
remote = "192.0.2.3"
aead = "aes-128-gcm"
key = "0x202122232425262728292a2b2c2d2e2fcafe0003"

[[policy]]
direction = "in"
priority = 10
src = "203.0.113.200/32"
dst = "198.51.100.0/24"
action = "protect"
sa = "scapy-to-gw1"
"""


def add_scapy_peer(tmp_path):
    """Gives gw1 an SA for a third peer played by scapy (reloaded, hitless)."""
    if any(s["name"] == "scapy-to-gw1" for s in show("gw1", "sa")):
        return
    cfg = gateway_file("gw1-scapy.toml", (STATE / "gw1.toml").read_text() + SCAPY_PEER)
    sh(ESPGW, "reload", "--config", cfg, "--control", STATE / "gw1.sock")


def test_scapy_sends_esp_to_the_live_gateway(bed, tmp_path):
    add_scapy_peer(tmp_path)
    rx = scapy_bg("h1", "listen", "7777", "8", "3")
    sent = scapy("wan", "esp-in", "1000000", "0", "3")
    got = result(rx)
    assert sent["frames"] == 3
    assert sorted(got["payloads"]) == [f"scapy-live-{i}:zzzzzzz"[:20] for i in range(3)], got


def test_fragmented_esp_is_reassembled(bed, tmp_path):
    add_scapy_peer(tmp_path)
    before = show("gw1", "stats")["host"]["reassembled"]
    rx = scapy_bg("h1", "listen", "7777", "8", "2")
    # Each 1094-byte ESP packet cut into fragments of 400 payload bytes (3 per packet).
    sent = scapy("wan", "esp-in", "2000000", "400", "2")
    got = result(rx)
    assert sent["frames"] == 6
    assert len(got["payloads"]) == 2 and all(n == 1013 for n in got["lengths"]), got
    assert host_stat("gw1", "reassembled", before + 2) == before + 2


def test_scapy_decrypts_esp_from_the_live_gateway(bed):
    cap = scapy_bg("wan", "esp-out", "8")
    nsx("h1", "/usr/bin/python3", "-c",
        "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
        "[s.sendto(b'hello-from-h1',('203.0.113.2',7778)) for _ in range(5)]")
    got = result(cap)
    assert got["outer"] == ["192.0.2.1", "192.0.2.2"], got
    assert (got["inner_src"], got["inner_dst"]) == ("198.51.100.2", "203.0.113.2")
    assert got["payload"] == "hello-from-h1"


def sa_drops(m, sa, reason):
    key = [k for k in m if k.startswith("espgw_sa_drops_total{") and f'sa="{sa}"' in k
           and f'reason="{reason}"' in k]
    assert len(key) == 1, key
    return m[key[0]]


def test_metrics_move_and_count_a_replayed_packet(bed):
    m0 = metrics("gw1")
    cap = scapy_bg("wan", "replay", "8")
    nsx("h2", "ping", "-c", "3", "-i", "0.2", "198.51.100.2")
    got = result(cap)
    assert got["replayed"] is not None
    m1 = wait_for(lambda: (lambda m: m if sa_drops(m, "gw2-to-gw1", "replay")
                           > sa_drops(m0, "gw2-to-gw1", "replay") else None)(metrics("gw1")),
                  timeout=3)
    assert m1 is not None, "replay not counted"
    assert sa_drops(m1, "gw2-to-gw1", "replay") == sa_drops(m0, "gw2-to-gw1", "replay") + 1
    assert m1['espgw_drops_total{reason="replay"}'] == m0['espgw_drops_total{reason="replay"}'] + 1
    out = 'espgw_sa_packets_total{sa="gw1-to-gw2",spi="0x00001001",direction="out"}'
    inn = 'espgw_sa_packets_total{sa="gw2-to-gw1",spi="0x00002001",direction="in"}'
    assert m1[out] >= m0[out] + 3 and m1[inn] >= m0[inn] + 3
    rx = 'espgw_port_rx_packets_total{port="north",interface="north"}'
    assert m1[rx] > m0[rx]
    # Every drop reason the issue names is exported per SA.
    for reason in ("replay", "auth_failed", "policy_mismatch", "seq_exhausted",
                   "lifetime_expired", "mtu", "no_route", "no_neighbour", "no_sa"):
        sa_drops(m1, "gw1-to-gw2", reason)
    # The human tables render.
    for what in ("sa", "policy", "routes", "neighbours", "ports", "stats"):
        r = sh(ESPGW, "show", what, "--control", STATE / "gw1.sock")
        assert r.stdout.strip(), what


EXTRA = """
[[sa]]
name = "extra-out"
direction = "out"
spi = 0x00001002
mode = "ipv4-tunnel"
local = "192.0.2.1"
remote = "192.0.2.2"
aead = "aes-256-gcm"
key = "0x{k}cafe0003"

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "198.18.0.0/15"
action = "protect"
sa = "extra-out"

[[route]]
dst = "198.18.0.0/15"
port = "north"
"""


def test_reload_under_traffic_loses_nothing(bed, tmp_path):
    base = (STATE / "gw1.toml").read_text()
    seq0 = {s["name"]: s["seq"] for s in show("gw1", "sa")}
    rx = listening(nspopen("h2", LAB, "testbed", "udp-recv", "--port", "9100", "--seconds", "7"))
    tx = nspopen("h1", LAB, "testbed", "udp-send", "--dst", "203.0.113.2:9100",
                 "--size", "200", "--seconds", "5", "--rate", "2000")
    time.sleep(1.0)
    # 1. An SA, a policy and a route added, the route to the transport net changed.
    new = gateway_file("gw1-new.toml",
                       base.replace('dst = "192.0.2.0/24"\nport = "north"',
                                    'dst = "192.0.2.0/25"\nport = "north"') + EXTRA.format(k="ab" * 32))
    r = sh(ESPGW, "reload", "--config", new, "--control", STATE / "gw1.sock")
    assert "reloaded" in r.stdout and "2 carried over" in r.stdout, r.stdout
    time.sleep(0.8)
    # 2. A broken configuration is refused with its line, the old one keeps running.
    bad = gateway_file("gw1-bad.toml", base + '\n[[route]]\ndst = "10.0.0.0/33"\nport = "north"\n')
    r = sh(ESPGW, "reload", "--config", bad, "--control", STATE / "gw1.sock", check=False)
    assert r.returncode != 0 and "gw1-bad.toml:" in r.stderr and "dst" in r.stderr, r.stderr
    time.sleep(0.8)
    # 3. SIGHUP re-reads the current file (the one reloaded in step 1).
    new.write_text(new.read_text().replace('"extra-out"', '"extra-out-2"'))
    # `ip netns exec` execs the gateway: the pid file holds the gateway's own pid.
    pid = (STATE / "gw1.pid").read_text().strip()
    assert "espgw" in pathlib.Path(f"/proc/{pid}/cmdline").read_text()
    sh("kill", "-HUP", pid)
    names = wait_for(lambda: "extra-out-2" in {s["name"] for s in show("gw1", "sa")}, timeout=3)
    assert names, "SIGHUP did not reload"
    sent = json.loads(tx.communicate(timeout=30)[0])["sent"]
    got = json.loads(rx.communicate(timeout=30)[0])
    assert sent > 8000
    assert got["packets"] == sent and got["lost"] == 0 and got["duplicates"] == 0, (sent, got)
    sas = {s["name"]: s for s in show("gw1", "sa")}
    assert sas["gw1-to-gw2"]["seq"] >= seq0["gw1-to-gw2"] + sent, "sequence numbers carried on"
    assert sas["extra-out-2"]["algorithm"] == "aes-256-gcm"
    routes = {r["dst"] for r in show("gw1", "routes")}
    assert "198.18.0.0/15" in routes and "192.0.2.0/25" in routes
    st = show("gw1", "stats")
    assert st["reloads"] >= 2 and st["reload_failures"] >= 1
    assert st["drops"].get("replay", 0) == show("gw1", "stats")["drops"].get("replay", 0)
    # Restore the original for the tests after this one.
    sh(ESPGW, "reload", "--config", STATE / "gw1.toml", "--control", STATE / "gw1.sock")


SLOW_CLIENTS = """
import json, socket, time, urllib.request
idle = [socket.create_connection(("127.0.0.1", 9101)) for _ in range(4)]
trickle = socket.create_connection(("127.0.0.1", 9101))
start = time.time()
body = urllib.request.urlopen("http://127.0.0.1:9101/metrics", timeout=5).read()
served_in = time.time() - start
# The slow ones are cut at the deadline (2 s), however they pace their bytes.
closed = []
for s in idle + [trickle]:
    s.settimeout(0.2)
deadline = time.time() + 6
while time.time() < deadline and len(closed) < 5:
    try:
        trickle.send(b"G")
    except OSError:
        pass
    for i, s in enumerate(idle + [trickle]):
        if i in closed:
            continue
        try:
            if s.recv(1) == b"":
                closed.append(i)
        except socket.timeout:
            pass
        except OSError:
            closed.append(i)
print(json.dumps({"served_in": served_in, "ok": b"espgw_uptime_seconds" in body,
                  "closed": len(closed), "after": time.time() - start}))
"""


def test_slow_metrics_clients_neither_block_others_nor_stay(bed):
    r = json.loads(nsx("gw1", "/usr/bin/python3", "-c", SLOW_CLIENTS, timeout=30).stdout)
    assert r["ok"] and r["served_in"] < 1.0, r
    assert r["closed"] == 5 and r["after"] < 5.0, r


def test_gateways_run_unprivileged_after_start_up(bed, tmp_path):
    """Issue 17, least privilege: both gateways are `nobody` with CAP_IPC_LOCK alone, a
    seccomp filter on every thread, memory locked; traffic, show, reload and metrics work
    so confined (the other tests of this module run against the same processes)."""
    for gw in ("gw1", "gw2"):
        assert_confined(int((STATE / f"{gw}.pid").read_text()))
    r = nsx("h1", "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.2", check=False)
    assert r.returncode == 0, r.stdout
    # A configuration only root can read: refused with a message that says why, and the
    # gateway runs on with what it had.
    secret = tmp_path / "root-only.toml"
    secret.write_text((STATE / "gw1.toml").read_text())
    r = sh(ESPGW, "reload", "--config", secret, "--control", STATE / "gw1.sock", check=False)
    assert r.returncode != 0
    assert "not readable by the gateway's user" in r.stderr and GATEWAY_USER in r.stderr, r.stderr
    assert show("gw1", "stats")["reload_failures"] >= 1
    r = nsx("h1", "ping", "-c", "2", "-i", "0.2", "-W", "2", "203.0.113.2", check=False)
    assert r.returncode == 0, r.stdout
    assert_confined(int((STATE / "gw1.pid").read_text()))
