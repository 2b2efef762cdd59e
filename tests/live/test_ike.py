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
    return f"""charon {{
  load = random nonce aes sha1 sha2 hmac gcm kdf openssl pem pkcs1 x509 pubkey socket-default kernel-espgw kernel-netlink vici
  install_routes = no
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


def swanctl_conf(side):
    return f"""connections {{
  tunnel {{
    version = 2
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


@pytest.fixture
def ike_bed(tmp_path):
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
    procs = []
    ctls = {}
    for g, side in SIDES.items():
        for link in ("south", "north"):
            ns(g, "ip", "link", "set", link, "up")
            ns(g, "ethtool", "-K", link, "tx", "off", "rx", "off", check=False)
        # The kernel holds the transport address for charon; ESP is espgw's alone.
        ns(g, "ip", "addr", "add", f"{side['me']}/24", "dev", "north")
        ns(g, "nft", "add table inet espgw-ike; "
                     "add chain inet espgw-ike input { type filter hook input priority 0; }; "
                     "add rule inet espgw-ike input meta l4proto esp drop; "
                     "add rule inet espgw-ike input udp dport 4500 @th,64,32 != 0 drop")
        d = tmp_path / g
        (d / "run").mkdir(parents=True)
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
        ctls[g] = ctl
        (d / "run/strongswan.conf").write_text(strongswan_conf(keying))
        (d / "run/swanctl.conf").write_text(swanctl_conf(side))
        clog = open(d / "charon.log", "w")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", g, "unshare", "-m", "sh", "-c",
             f"mount --bind {d / 'run'} /run && STRONGSWAN_CONF=/run/strongswan.conf "
             "exec /usr/lib/ipsec/charon"], stdout=clog, stderr=clog))
        vici = d / "run/charon.vici"
        assert wait_for(lambda: vici.exists(), timeout=10), (d / "charon.log").read_text()
        ns(g, "swanctl", "--load-all", "--file", str(d / "run/swanctl.conf"),
           "--uri", f"unix://{vici}")
    yield dict(tmp=tmp_path, ctls=ctls)
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
    tmp, ctls = ike_bed["tmp"], ike_bed["ctls"]
    vici = tmp / GW1 / "run/charon.vici"
    out = ns(GW1, "swanctl", "--initiate", "--child", "net", "--timeout", "20",
             "--uri", f"unix://{vici}", check=False)
    logs = "\n".join((tmp / g / f).read_text() for g in (GW1, GW2)
                     for f in ("charon.log", "espgw.log"))
    assert out.returncode == 0, out.stdout + out.stderr + logs
    # Each gateway holds one inbound and one outbound negotiated SA (AES-128-GCM).
    for g in (GW1, GW2):
        assert wait_for(lambda: len([s for s in show(ctls[g], "sa") if s["source"] == "ike"]) == 2,
                        timeout=10), show(ctls[g], "sa")
        sas = [s for s in show(ctls[g], "sa") if s["source"] == "ike"]
        assert sorted(s["direction"] for s in sas) == ["in", "out"], sas
        assert all(s["algorithm"] == "aes-128-gcm" and s["reqid"] for s in sas), sas
        k = show(ctls[g], "keying")
        assert k["sessions"] == 1 and k["negotiated_sas"] == 2, k
    # The SPIs agree: gw1's outbound is gw2's inbound and the other way round.
    spis = {g: {s["direction"]: s["spi"] for s in show(ctls[g], "sa") if s["source"] == "ike"}
            for g in (GW1, GW2)}
    assert spis[GW1]["out"] == spis[GW2]["in"] and spis[GW2]["out"] == spis[GW1]["in"], spis
    ping = ns(H1, "ping", "-c", "5", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout + logs
    out_sa = [s for s in show(ctls[GW1], "sa") if s["source"] == "ike" and s["direction"] == "out"]
    assert out_sa[0]["packets"] >= 5, out_sa
    in_sa = [s for s in show(ctls[GW2], "sa") if s["source"] == "ike" and s["direction"] == "in"]
    assert in_sa[0]["packets"] >= 5, in_sa
    # charon sees the counters through the plugin (QUERY_SA).
    listed = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici}").stdout
    assert "INSTALLED" in listed, listed
    outbound = re.search(r"\bout\s+\S+,\s+(\d+) bytes,\s+(\d+) packets", listed)
    assert outbound and int(outbound.group(2)) >= 5, listed
