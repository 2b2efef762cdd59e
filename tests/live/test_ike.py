"""IKEv2 through strongSwan's charon: two gateways, each espgw with the SA contract on
(`--keying-socket`) and an unmodified Debian charon loading the kernel-espgw plugin,
negotiate a CHILD_SA with a pre-shared key; hosts behind them ping through the tunnel
espgw's data plane carries.

    h1 --- [south] gw1 [north] 192.0.2.1 ==== IKE + ESP ==== 192.0.2.2 gw2 --- h2
    198.51.100.0/24                                                       203.0.113.0/24

espgw reads its ports with AF_PACKET, so the namespace's kernel sees every frame too:
it holds the transport address for charon's IKE socket, and nftables keeps ESP (and
ESP-in-UDP) away from it (it has no ESP and would answer with ICMP)."""
import json
import re
import pathlib
import shutil
import subprocess
import time

import pytest

from conftest import ESPGW, ROOT, sh, wait_for

P = "espgw-ike-"
H1, GW1, GW2, H2 = P + "h1", P + "gw1", P + "gw2", P + "h2"
PLUGIN = pathlib.Path("/usr/lib/ipsec/plugins/libstrongswan-kernel-espgw.so")
PSK = "espgw-live-test-psk-not-secret"

SIDES = {
    GW1: dict(me="192.0.2.1", peer="192.0.2.2", inside="198.51.100.1/24",
              local_ts="198.51.100.0/24", remote_ts="203.0.113.0/24"),
    GW2: dict(me="192.0.2.2", peer="192.0.2.1", inside="203.0.113.1/24",
              local_ts="203.0.113.0/24", remote_ts="198.51.100.0/24"),
}


def ns(n, *a, **kw):
    return sh("ip", "netns", "exec", n, *a, **kw)


def build_plugin(tmp):
    out = tmp / "plugin"
    sh("bash", str(ROOT / "plugins/kernel-espgw/build.sh"), str(out))
    built = out / "libstrongswan-kernel-espgw.so"
    if not PLUGIN.exists() or PLUGIN.read_bytes() != built.read_bytes():
        shutil.copy(built, PLUGIN)
    return PLUGIN


def gateway_config(side):
    return f"""burst = 32
[[port]]
name = "south"
interface = "south"
addresses = ["{side['inside']}"]
[[port]]
name = "north"
interface = "north"
addresses = ["{side['me']}/24"]
[[route]]
dst = "192.0.2.0/24"
port = "north"
[[route]]
dst = "{side['local_ts']}"
port = "south"
"""


def strongswan_conf(socket):
    """charon with kernel-espgw (socket given) or, for stock strongSwan, kernel-libipsec
    (its own userspace ESP on a TUN device, routes through it installed by charon)."""
    backend = "kernel-espgw" if socket else "kernel-libipsec"
    routes = "no" if socket else "yes"
    return f"""charon {{
  load = random nonce aes sha1 sha2 hmac gcm kdf openssl pem pkcs1 x509 pubkey socket-default {backend} kernel-netlink vici
  install_routes = {routes}
  install_virtual_ip = no
  filelog {{
    stderr {{
      default = 1
      knl = 2
      time_format = %T
    }}
  }}
  plugins {{
    vici {{
      socket = unix:///run/charon.vici
    }}
    kernel-espgw {{
      socket = {socket}
    }}
  }}
}}
"""


def swanctl_conf(side, encap=False, trap=False):
    return f"""connections {{
  tunnel {{
    version = 2
    encap = {"yes" if encap else "no"}
    local_addrs = {side['me']}
    remote_addrs = {side['peer']}
    proposals = aes128gcm16-prfsha256-modp2048
    local {{
      auth = psk
      id = {side['me']}
    }}
    remote {{
      auth = psk
      id = {side['peer']}
    }}
    children {{
      net {{
        local_ts = {side['local_ts']}
        remote_ts = {side['remote_ts']}
        esp_proposals = aes128gcm16
        start_action = {"trap" if trap else "none"}
      }}
    }}
  }}
}}
secrets {{
  ike-tunnel {{
    id-1 = 192.0.2.1
    id-2 = 192.0.2.2
    secret = "{PSK}"
  }}
}}
"""


def show(ctl, what):
    return json.loads(sh(ESPGW, "show", what, "--json", "--control", str(ctl)).stdout)


def start_espgw(g, side, d, procs):
    """espgw on the gateway's ports, the SA contract on; the kernel keeps the transport
    address for charon, and nftables keeps ESP from it."""
    for link in ("south", "north"):
        ns(g, "ethtool", "-K", link, "tx", "off", "rx", "off", check=False)
    ns(g, "ip", "addr", "add", f"{side['me']}/24", "dev", "north")
    ns(g, "nft", "add table inet espgw-ike; "
                 "add chain inet espgw-ike input { type filter hook input priority 0; }; "
                 "add rule inet espgw-ike input meta l4proto esp drop; "
                 "add rule inet espgw-ike input udp dport 4500 @th,64,32 != 0 drop")
    cfg = d / "gw.toml"
    cfg.write_text(gateway_config(side))
    cfg.chmod(0o600)
    ctl, keying = d / "ctl.sock", d / "keying.sock"
    log = open(d / "espgw.log", "w")
    procs.append(subprocess.Popen(
        ["ip", "netns", "exec", g, ESPGW, "run", "--config", str(cfg), "--io", "af-packet",
         "--control", str(ctl), "--keying-socket", str(keying), "--state-dir", str(d / "state"),
         "--user", "root"], stdout=log, stderr=log))
    assert wait_for(lambda: ctl.exists() and keying.exists(), timeout=10), \
        (d / "espgw.log").read_text()
    return ctl, keying


def start_stock_strongswan(g, side):
    """gw2 as any strongSwan gateway: the kernel forwards, kernel-libipsec encrypts."""
    ns(g, "ip", "addr", "add", f"{side['me']}/24", "dev", "north")
    ns(g, "ip", "addr", "add", side["inside"], "dev", "south")
    ns(g, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")


def start_charon(g, side, d, keying, encap, procs):
    (d / "run/strongswan.conf").write_text(strongswan_conf(keying))
    # gw1 traps: its first outbound packet starts the negotiation (ACQUIRE).
    (d / "run/swanctl.conf").write_text(swanctl_conf(side, encap, trap=g == GW1))
    clog = open(d / "charon.log", "w")
    procs.append(subprocess.Popen(
        ["ip", "netns", "exec", g, "unshare", "-m", "sh", "-c",
         f"mount --bind {d / 'run'} /run && STRONGSWAN_CONF=/run/strongswan.conf "
         "exec /usr/lib/ipsec/charon"], stdout=clog, stderr=clog))
    vici = d / "run/charon.vici"
    assert wait_for(lambda: vici.exists(), timeout=10), (d / "charon.log").read_text()
    ns(g, "swanctl", "--load-all", "--file", str(d / "run/swanctl.conf"),
       "--uri", f"unix://{vici}")


@pytest.fixture(params=["espgw", "strongswan"])
def ike_bed(request, tmp_path):
    """gw1 is espgw + charon + kernel-espgw; gw2 the same, or stock strongSwan
    (kernel-libipsec, which speaks ESP only inside UDP: both sides then encapsulate)."""
    peer = request.param
    build_plugin(tmp_path)
    names = (H1, GW1, GW2, H2)
    for n in names:
        sh("ip", "netns", "del", n, check=False)
        sh("ip", "netns", "add", n)
        ns(n, "ip", "link", "set", "lo", "up")
        ns(n, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
    sh("ip", "link", "add", "eth0", "netns", H1, "type", "veth", "peer", "name", "south",
       "netns", GW1)
    sh("ip", "link", "add", "north", "netns", GW1, "type", "veth", "peer", "name", "north",
       "netns", GW2)
    sh("ip", "link", "add", "eth0", "netns", H2, "type", "veth", "peer", "name", "south",
       "netns", GW2)
    for h, addr, gw in ((H1, "198.51.100.10/24", "198.51.100.1"),
                        (H2, "203.0.113.10/24", "203.0.113.1")):
        ns(h, "ip", "addr", "add", addr, "dev", "eth0")
        ns(h, "ip", "link", "set", "eth0", "up")
        ns(h, "ip", "route", "add", "default", "via", gw)
    procs, ctls = [], {}
    encap = peer == "strongswan"
    for g, side in SIDES.items():
        for link in ("south", "north"):
            ns(g, "ip", "link", "set", link, "up")
        d = tmp_path / g
        (d / "run").mkdir(parents=True)
        if g == GW2 and peer == "strongswan":
            start_stock_strongswan(g, side)
            keying = None
        else:
            ctls[g], keying = start_espgw(g, side, d, procs)
        start_charon(g, side, d, keying, encap, procs)
    yield dict(tmp=tmp_path, ctls=ctls, peer=peer)
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    for n in names:
        sh("ip", "netns", "del", n, check=False)
    assert not [n for n in sh("ip", "netns", "list").stdout.split() if n in names]


def test_ikev2_negotiates_sas_that_espgw_carries(ike_bed):
    """espgw + charon against espgw + charon (raw ESP), and against stock strongSwan
    (kernel-libipsec, ESP in UDP 4500): IKE_SA and CHILD_SA established, the SAs in espgw,
    hosts ping through, the counters reach charon."""
    tmp, ctls, peer = ike_bed["tmp"], ike_bed["ctls"], ike_bed["peer"]
    vici = tmp / GW1 / "run/charon.vici"
    out = ns(GW1, "swanctl", "--initiate", "--child", "net", "--timeout", "20",
             "--uri", f"unix://{vici}", check=False)
    logs = "\n".join(p.read_text() for g in (GW1, GW2)
                     for p in (tmp / g / "charon.log", tmp / g / "espgw.log") if p.exists())
    assert out.returncode == 0, out.stdout + out.stderr + logs
    # Each espgw holds one inbound and one outbound negotiated SA (AES-128-GCM).
    for g, ctl in ctls.items():
        assert wait_for(lambda: len([s for s in show(ctl, "sa") if s["source"] == "ike"]) == 2,
                        timeout=10), show(ctl, "sa")
        sas = [s for s in show(ctl, "sa") if s["source"] == "ike"]
        assert sorted(s["direction"] for s in sas) == ["in", "out"], sas
        assert all(s["algorithm"] == "aes-128-gcm" and s["reqid"] for s in sas), sas
        assert all(s["udp_encap"] == (peer == "strongswan") for s in sas), sas
        k = show(ctl, "keying")
        assert k["sessions"] == 1 and k["negotiated_sas"] == 2, k
    if peer == "espgw":
        # The SPIs agree: gw1's outbound is gw2's inbound and the other way round.
        spis = {g: {s["direction"]: s["spi"] for s in show(ctls[g], "sa")
                    if s["source"] == "ike"} for g in (GW1, GW2)}
        assert spis[GW1]["out"] == spis[GW2]["in"], spis
        assert spis[GW2]["out"] == spis[GW1]["in"], spis
    ping = ns(H1, "ping", "-c", "5", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout + logs
    sas = {s["direction"]: s for s in show(ctls[GW1], "sa") if s["source"] == "ike"}
    assert sas["out"]["packets"] >= 5 and sas["in"]["packets"] >= 5, sas
    # charon sees espgw's counters through the plugin (QUERY_SA).
    listed = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici}").stdout
    assert "INSTALLED" in listed, listed
    outbound = re.search(r"\bout\s+\S+,\s+(\d+) bytes,\s+(\d+) packets", listed)
    assert outbound and int(outbound.group(2)) >= 5, listed


def test_traffic_before_the_sa_exists_starts_negotiation(ike_bed):
    """gw1's trap policy: plaintext before any SA is dropped (counted as `acquire`), espgw
    sends ACQUIRE, charon negotiates, and the rest of the traffic goes through."""
    tmp, ctls = ike_bed["tmp"], ike_bed["ctls"]
    policies = show(ctls[GW1], "policy")
    assert any(p["action"].startswith("acquire reqid") for p in policies), policies
    ping = ns(H1, "ping", "-c", "15", "-i", "0.2", "-W", "1", "203.0.113.10", check=False)
    received = int(re.search(r"(\d+) received", ping.stdout).group(1))
    logs = "\n".join(p.read_text() for g in (GW1, GW2)
                     for p in (tmp / g / "charon.log", tmp / g / "espgw.log") if p.exists())
    assert received >= 8, ping.stdout + logs
    stats = show(ctls[GW1], "stats")
    assert stats["drops"].get("acquire", 0) >= 1, stats
    k = show(ctls[GW1], "keying")
    assert k["acquires_sent"] >= 1 and k["negotiated_sas"] == 2, k
    vici = tmp / GW1 / "run/charon.vici"
    listed = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici}").stdout
    assert "ESTABLISHED" in listed and "INSTALLED" in listed, listed
