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
import os
import re
import pathlib
import shutil
import subprocess
import time

import pytest

from conftest import ESPGW, ROOT, listening, sh, start_capture, wait_for

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
# With a NAT between gw1 and the transport link: gw1 sits in 198.18.0.0/24 behind a box
# that masquerades it as 192.0.2.100; gw2 accepts gw1 from any address by its identity.
NAT_SIDES = {
    GW1: dict(SIDES[GW1], me="198.18.0.1", via="198.18.0.254"),
    GW2: dict(SIDES[GW2], peer="198.18.0.1", remote_addrs="%any"),
}
NAT = P + "nat"


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
    net = side["me"].rsplit(".", 1)[0] + ".0/24"
    # The transport address's own network, where it is not the transport link (NAT).
    own_net = "" if net == "192.0.2.0/24" else f'[[route]]\ndst = "{net}"\nport = "north"\n'
    return f"""burst = 32
[[port]]
name = "south"
interface = "south"
addresses = ["{side['inside']}"]
[[port]]
name = "north"
interface = "north"
addresses = ["{side['me']}/24"]
{own_net}[[route]]
dst = "192.0.2.0/24"
port = "north"
{f'via = "{side["via"]}"' if "via" in side else ""}
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
  # A dead peer is declared after about 5 s of silence (DPD), not after minutes.
  retransmit_tries = 2
  retransmit_timeout = 1
  retransmit_base = 1.4
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


def make_ca(ca):
    if not (ca / "ca.pem").exists():
        ca.mkdir(exist_ok=True)
        sh("sh", "-c", f"pki --gen --type ecdsa --size 256 --outform pem > {ca}/ca.key && "
                       f"pki --self --ca --lifetime 30 --in {ca}/ca.key --type ecdsa "
                       f"--dn 'CN=espgw test CA {ca.name}' --outform pem > {ca}/ca.pem")
    return ca


def make_certificates(d, g, side, rogue):
    """A test CA (strongswan-pki, ECDSA P-256) and this gateway's key and certificate with
    its address as identity, where swanctl loads them (ecdsa/, x509/, x509ca/ beside its
    swanctl.conf). With `rogue`, the certificate comes from another CA, one the peer does
    not trust. Returns what swanctl.conf names."""
    trusted = make_ca(d.parent / "ca")
    issuer = make_ca(d.parent / "rogue-ca") if rogue else trusted
    run = d / "run"
    for sub in ("ecdsa", "x509", "x509ca"):
        (run / sub).mkdir(exist_ok=True)
    shutil.copy(trusted / "ca.pem", run / "x509ca" / "ca.pem")
    sh("sh", "-c", f"pki --gen --type ecdsa --size 256 --outform pem > {run}/ecdsa/gw.key && "
                   f"pki --pub --in {run}/ecdsa/gw.key --type ecdsa | pki --issue --lifetime 30 "
                   f"--cacert {issuer}/ca.pem --cakey {issuer}/ca.key --dn 'CN={side['me']}' "
                   f"--san {side['me']} --outform pem > {run}/x509/gw.pem")
    return dict(cert="gw.pem", ca="ca.pem")


def swanctl_conf(side, encap=False, trap=False, opts=None, certs=None):
    """The connection; `opts` may set CHILD_SA and IKE_SA rekey times and their random
    part (`rekey`, `ike_rekey`, `rand`), and the initiator of rekeys. With `certs`,
    authentication is by X.509 certificate instead of the pre-shared key."""
    opts = opts or {}
    if certs:
        local_auth = f"auth = pubkey\n      certs = {certs['cert']}"
        remote_auth = f"auth = pubkey\n      cacerts = {certs['ca']}"
        secret = ""
    else:
        local_auth = remote_auth = "auth = psk"
        secret = f"""ike-tunnel {{
    id-1 = {side['me']}
    id-2 = {side['peer']}
    secret = "{PSK}"
  }}"""
    child_times = ""
    if "rekey" in opts:
        child_times = (f"rekey_time = {opts['rekey']}\n        rand_time = {opts.get('rand', '1s')}"
                       f"\n        life_time = {opts.get('life', '60s')}")
    ike_times = f"rekey_time = {opts['ike_rekey']}" if "ike_rekey" in opts else ""
    if opts.get("dpd"):
        ike_times += "\n    dpd_delay = 2s\n    keyingtries = 0"
        child_times += "\n        dpd_action = restart"
    return f"""connections {{
  tunnel {{
    version = 2
    {ike_times}
    encap = {"yes" if encap else "no"}
    local_addrs = {side['me']}
    remote_addrs = {side.get('remote_addrs', side['peer'])}
    proposals = aes128gcm16-prfsha256-modp2048
    local {{
      {local_auth}
      id = {side['me']}
    }}
    remote {{
      {remote_auth}
      id = {side['peer']}
    }}
    children {{
      net {{
        local_ts = {side['local_ts']}
        remote_ts = {side['remote_ts']}
        esp_proposals = {opts.get("esp", "aes128gcm16")}
        start_action = {"trap" if trap else "none"}
        {child_times}
      }}
    }}
  }}
}}
secrets {{
  {secret}
}}
"""


def show(ctl, what):
    return json.loads(sh(ESPGW, "show", what, "--json", "--control", str(ctl)).stdout)


def start_espgw(g, side, d, procs, io="af-packet"):
    """espgw on the gateway's ports, the SA contract on; the kernel keeps the transport
    address for charon, and nftables keeps ESP from it (with AF_PACKET the kernel sees a
    copy of every frame; with AF_XDP espgw's XDP program hands it only IKE)."""
    for link in ("south", "north"):
        ns(g, "ethtool", "-K", link, "tx", "off", "rx", "off", check=False)
    ns(g, "ip", "addr", "add", f"{side['me']}/24", "dev", "north")
    if "via" in side:
        ns(g, "ip", "route", "add", "192.0.2.0/24", "via", side["via"])
    ns(g, "nft", "add table inet espgw-ike; "
                 "add chain inet espgw-ike input { type filter hook input priority 0; }; "
                 "add rule inet espgw-ike input meta l4proto esp drop; "
                 "add rule inet espgw-ike input udp dport 4500 @th,64,32 != 0 drop")
    cfg = d / "gw.toml"
    cfg.write_text(gateway_config(side))
    cfg.chmod(0o600)
    (d / "io").write_text(io)
    launch_espgw(g, d, procs)
    return d / "ctl.sock", d / "keying.sock"


def launch_espgw(g, d, procs):
    ctl, keying = d / "ctl.sock", d / "keying.sock"
    io = (d / "io").read_text() if (d / "io").exists() else "af-packet"
    log = open(d / "espgw.log", "a")
    procs[(g, "espgw")] = subprocess.Popen(
        ["ip", "netns", "exec", g, ESPGW, "run", "--config", str(d / "gw.toml"), "--io",
         io, "--control", str(ctl), "--keying-socket", str(keying), "--state-dir",
         str(d / "state"), "--user", "root"], stdout=log, stderr=log)
    assert wait_for(lambda: ctl.exists() and keying.exists(), timeout=10), \
        (d / "espgw.log").read_text()


def start_stock_strongswan(g, side):
    """gw2 as any strongSwan gateway: the kernel forwards, kernel-libipsec encrypts."""
    ns(g, "ip", "addr", "add", f"{side['me']}/24", "dev", "north")
    ns(g, "ip", "addr", "add", side["inside"], "dev", "south")
    ns(g, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")


def start_charon(g, side, d, keying, encap, procs, opts=None):
    opts = opts or {}
    (d / "run/strongswan.conf").write_text(strongswan_conf(keying))
    certs = None
    if opts.get("auth") == "cert":
        certs = make_certificates(d, g, side, rogue=opts.get("rogue") == g)
    # gw1 traps: its first outbound packet starts the negotiation (ACQUIRE).
    (d / "run/swanctl.conf").write_text(
        swanctl_conf(side, encap, trap=g == GW1, opts=opts, certs=certs))
    launch_charon(g, d, procs)


def launch_charon(g, d, procs):
    vici = d / "run/charon.vici"
    vici.unlink(missing_ok=True)
    clog = open(d / "charon.log", "a")
    procs[(g, "charon")] = subprocess.Popen(
        ["ip", "netns", "exec", g, "unshare", "-m", "sh", "-c",
         f"mount --bind {d / 'run'} /run && STRONGSWAN_CONF=/run/strongswan.conf "
         "exec /usr/lib/ipsec/charon"], stdout=clog, stderr=clog)
    assert wait_for(lambda: vici.exists(), timeout=10), (d / "charon.log").read_text()
    ns(g, "swanctl", "--load-all", "--file", str(d / "run/swanctl.conf"),
       "--uri", f"unix://{vici}")


@pytest.fixture(params=["espgw", "strongswan"])
def ike_bed(request, tmp_path):
    """gw1 is espgw + charon + kernel-espgw; gw2 the same, or stock strongSwan
    (kernel-libipsec, which speaks ESP only inside UDP: both sides then encapsulate). A
    test may pass a dict instead (indirect parametrisation): `peer` and the connection's
    rekey options (see swanctl_conf)."""
    opts = request.param if isinstance(request.param, dict) else {"peer": request.param}
    peer = opts["peer"]
    build_plugin(tmp_path)
    sides = NAT_SIDES if opts.get("nat") else SIDES
    names = (H1, GW1, GW2, H2) + ((NAT,) if opts.get("nat") else ())

    def teardown():
        for p in reversed(list(procs.values())):
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for n in names:
            sh("ip", "netns", "del", n, check=False)

    procs, ctls = {}, {}
    # A set-up that fails half-way still stops what it started (pytest runs no teardown
    # for a fixture whose set-up raised).
    try:
        for n in names:
            sh("ip", "netns", "del", n, check=False)
            sh("ip", "netns", "add", n)
            ns(n, "ip", "link", "set", "lo", "up")
            ns(n, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "link", "add", "eth0", "netns", H1, "type", "veth", "peer", "name", "south",
           "netns", GW1)
        if opts.get("nat"):
            sh("ip", "link", "add", "north", "netns", GW1, "type", "veth", "peer", "name", "inner",
               "netns", NAT)
            sh("ip", "link", "add", "outer", "netns", NAT, "type", "veth", "peer", "name", "north",
               "netns", GW2)
            for link, addr in (("inner", "198.18.0.254/24"), ("outer", "192.0.2.100/24")):
                ns(NAT, "ip", "addr", "add", addr, "dev", link)
                ns(NAT, "ip", "link", "set", link, "up")
            ns(NAT, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
            ns(NAT, "nft", "add table ip nat; "
                           "add chain ip nat post { type nat hook postrouting priority 100; }; "
                           "add rule ip nat post oifname outer masquerade")
        else:
            sh("ip", "link", "add", "north", "netns", GW1, "type", "veth", "peer", "name", "north",
               "netns", GW2)
        sh("ip", "link", "add", "eth0", "netns", H2, "type", "veth", "peer", "name", "south",
           "netns", GW2)
        for h, addr, gw in ((H1, "198.51.100.10/24", "198.51.100.1"),
                            (H2, "203.0.113.10/24", "203.0.113.1")):
            ns(h, "ip", "addr", "add", addr, "dev", "eth0")
            ns(h, "ip", "link", "set", "eth0", "up")
            # Checksums filled in software: espgw encrypts the frame as the host wrote it.
            ns(h, "ethtool", "-K", "eth0", "tx", "off", "rx", "off", check=False)
            ns(h, "ip", "route", "add", "default", "via", gw)
        encap = peer == "strongswan"
        for g, side in sides.items():
            for link in ("south", "north"):
                ns(g, "ip", "link", "set", link, "up")
            d = tmp_path / g
            (d / "run").mkdir(parents=True)
            if g == GW2 and peer == "strongswan":
                start_stock_strongswan(g, side)
                keying = None
            else:
                ctls[g], keying = start_espgw(g, side, d, procs, opts.get("io", "af-packet"))
            start_charon(g, side, d, keying, encap, procs, opts)
        if opts.get("io") == "af-xdp":
            # ARP replies go to espgw's socket, so the kernel (charon's IKE packets) is
            # given each peer's link-layer address.
            for g, other in ((GW1, GW2), (GW2, GW1)):
                mac = json.loads(sh("ip", "-n", other, "-j", "link", "show", "north")
                                 .stdout)[0]["address"]
                ns(g, "ip", "neigh", "replace", sides[other]["me"], "lladdr", mac,
                   "nud", "permanent", "dev", "north")
    except BaseException:
        teardown()
        raise
    yield dict(tmp=tmp_path, ctls=ctls, peer=peer, procs=procs, io=opts.get("io", "af-packet"))
    teardown()
    assert not [n for n in sh("ip", "netns", "list").stdout.split() if n in names]


@pytest.mark.parametrize("ike_bed", ["espgw", "strongswan", dict(peer="espgw", io="af-xdp")],
                         indirect=True, ids=["espgw", "strongswan", "espgw-af-xdp"])
def test_ikev2_negotiates_sas_that_espgw_carries(ike_bed):
    """espgw + charon against espgw + charon (raw ESP), and against stock strongSwan
    (kernel-libipsec, ESP in UDP 4500): IKE_SA and CHILD_SA established, the SAs in espgw,
    hosts ping through, the counters reach charon. With AF_XDP too: espgw's XDP program
    passes IKE to the kernel, where charon listens, and keeps ESP."""
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
    # Each end of the transport link captures what it receives (espgw's AF_PACKET
    # transmissions bypass the sender's own taps). With AF_XDP on both ends no tap sees
    # the link (XDP redirects before the taps, and socket transmissions bypass them): the
    # AF_PACKET variant checks the wire with tshark, this one the SA counters.
    xdp = ike_bed["io"] == "af-xdp"
    caps = {} if xdp else {g: tmp / f"transport-{g}.pcap" for g in (GW1, GW2)}
    tsharks = [start_capture(g, "north", c, 5, bpf="esp or udp port 4500") for g, c in caps.items()]
    ping = ns(H1, "ping", "-c", "5", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout + logs
    for t in tsharks:
        t.wait(timeout=30)
    if caps:
        decrypts_with_espgws_keys(list(caps.values()), ctls[GW1])
    else:
        # Both espgws decrypted what the other encrypted, nothing failed authentication.
        for g in (GW1, GW2):
            sas = {s["direction"]: s for s in show(ctls[g], "sa") if s["source"] == "ike"}
            assert sas["in"]["packets"] >= 5, sas
            assert show(ctls[g], "stats")["drops"].get("auth_failed", 0) == 0
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


def rekey_under_load(ike_bed, initiate_both):
    """A sequence-numbered UDP stream at 20,000 packets a second for 60 s from h1 to h2
    while CHILD_SAs rekey every 10 s and the IKE_SA every 30 s: nothing lost, nothing
    duplicated, no plaintext on the transport link."""
    tmp, ctls = ike_bed["tmp"], ike_bed["ctls"]
    vici = {g: tmp / g / "run/charon.vici" for g in (GW1, GW2)}
    out = ns(GW1, "swanctl", "--initiate", "--child", "net", "--timeout", "20",
             "--uri", f"unix://{vici[GW1]}", check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert wait_for(lambda: show(ctls[GW2], "keying")["negotiated_sas"] == 2, timeout=10)
    cap = tmp / "north.pcap"
    tshark = start_capture(GW2, "north", cap, 66, bpf="udp port 9300")
    rx = subprocess.Popen(["ip", "netns", "exec", H2, str(pathlib.Path(ESPGW).with_name("espgw-lab")),
                           "testbed", "udp-recv", "--port", "9300", "--seconds", "64"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listening(rx)
    tx = subprocess.Popen(["ip", "netns", "exec", H1, str(pathlib.Path(ESPGW).with_name("espgw-lab")),
                           "testbed", "udp-send", "--dst", "203.0.113.10:9300", "--size", "100",
                           "--seconds", os.environ.get("IKE_LOAD_SECONDS", "60"), "--rate", "20000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = json.loads(tx.communicate(timeout=90)[0])["sent"]
    got = json.loads(rx.communicate(timeout=90)[0])
    tshark.wait(timeout=90)
    plain = sh("tshark", "-r", cap, "-Y", "udp.dstport == 9300").stdout.strip().splitlines()
    k = {g: show(ctls[g], "keying") for g in (GW1, GW2)}
    logs = "\n".join((tmp / g / "charon.log").read_text()[-4000:] for g in (GW1, GW2))
    assert sent >= 20_000 * (int(os.environ.get("IKE_LOAD_SECONDS", "60")) - 5), sent
    stats = {g: show(ctls[g], "stats") for g in (GW1, GW2)}
    assert got["packets"] == sent and got["lost"] == 0 and got["duplicates"] == 0, (got, sent, stats)
    assert plain == [], plain[:5]
    # At least five CHILD_SA rekeys: two SAs installed each time on each side.
    assert k[GW1]["sas_installed"] >= 2 + 2 * 5, k
    assert k[GW1]["expire_soft_sent"] >= 5, k
    if initiate_both:
        # Both sides' SAs reached their soft lifetime: both asked for rekeys.
        assert k[GW2]["expire_soft_sent"] >= 5, k
    print(f"rekey under load: sent {sent}, received {got['packets']}, lost {got['lost']}, "
          f"duplicates {got['duplicates']}, plaintext frames {len(plain)}; gw1 SAs installed "
          f"{k[GW1]['sas_installed']}, soft expiries sent gw1 {k[GW1]['expire_soft_sent']} "
          f"gw2 {k[GW2]['expire_soft_sent']}")
    ike = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici[GW1]}").stdout
    assert "ESTABLISHED" in ike and "INSTALLED" in ike, ike
    return k


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", rekey="10s", rand="2s",
                                          ike_rekey="30s")], indirect=True)
def test_rekey_under_load_loses_nothing(ike_bed):
    rekey_under_load(ike_bed, initiate_both=False)


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", rekey="10s", rand="0s",
                                          ike_rekey="30s")], indirect=True)
def test_rekey_collisions_lose_nothing(ike_bed):
    """No random part: both gateways' SAs reach their soft lifetime together and both
    start the rekey (a collision, RFC 7296 §2.8.1), every time."""
    rekey_under_load(ike_bed, initiate_both=True)


def decrypts_with_espgws_keys(pcaps, ctl):
    """tshark (an implementation independent of espgw and strongSwan) decrypts the transport
    link's ESP both ways with the keys `espgw show sa --json --keys` gives, and finds every
    ICV good: 5 echo requests out, 5 replies in."""
    sas = json.loads(sh(ESPGW, "show", "sa", "--json", "--keys", "--control", str(ctl)).stdout)
    # Both SAs in tshark's ESP SA table (one -o uat: option holds one record only).
    conf = pathlib.Path(pcaps[0]).with_name("wireshark")
    conf.mkdir(exist_ok=True)
    rows = []
    for sa in (s for s in sas if s["source"] == "ike"):
        src, dst = ((sa["local"], sa["remote"]) if sa["direction"] == "out"
                    else (sa["remote"], sa["local"]))
        rows.append(f'"IPv4","{src}","{dst}","{sa["spi"]}","AES-GCM with 16 octet ICV [RFC4106]",'
                    f'"0x{sa["enc_key"]}","NULL",""')
    (conf / "esp_sa").write_text("\n".join(rows) + "\n")
    text = "".join(sh("tshark", "-r", str(p), "-o", "esp.enable_encryption_decode:TRUE",
                      "-o", "esp.enable_authentication_check:TRUE", "-V", timeout=120,
                      env={**os.environ, "WIRESHARK_CONFIG_DIR": str(conf)}).stdout
                   for p in pcaps)
    good = len(re.findall(r"\[Good: True\]", text))
    assert good >= 10, text[-3000:]
    assert "[Bad: True]" not in text, text[-3000:]
    assert text.count("Echo (ping) request") >= 5 and text.count("Echo (ping) reply") >= 5
    # Without --keys no key leaves the gateway.
    plain = sh(ESPGW, "show", "sa", "--json", "--control", str(ctl)).stdout
    assert "enc_key" not in plain


def initiate(bed):
    vici = bed["tmp"] / GW1 / "run/charon.vici"
    out = ns(GW1, "swanctl", "--initiate", "--child", "net", "--timeout", "20",
             "--uri", f"unix://{vici}", check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    for ctl in bed["ctls"].values():
        assert wait_for(lambda: show(ctl, "keying")["negotiated_sas"] == 2, timeout=10)


def paced_stream(bed, seconds, action, rate=1000, port=9400):
    """A sequence-numbered stream from h1 to h2 at `rate` packets a second for `seconds`,
    `action()` run 3 s in; returns (sent, the receiver's report)."""
    lab = str(pathlib.Path(ESPGW).with_name("espgw-lab"))
    rx = subprocess.Popen(["ip", "netns", "exec", H2, lab, "testbed", "udp-recv", "--port",
                           str(port), "--seconds", str(seconds + 4)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listening(rx)
    tx = subprocess.Popen(["ip", "netns", "exec", H1, lab, "testbed", "udp-send", "--dst",
                           f"203.0.113.10:{port}", "--size", "100", "--seconds", str(seconds),
                           "--rate", str(rate)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    action()
    sent = json.loads(tx.communicate(timeout=seconds + 30)[0])["sent"]
    got = json.loads(rx.communicate(timeout=seconds + 30)[0])
    return sent, got


@pytest.mark.parametrize("ike_bed", ["espgw"], indirect=True)
def test_espgw_killed_and_restarted_under_charon_renegotiates(ike_bed):
    """espgw on gw1 killed with SIGKILL and started again while charon runs: the plugin
    reconnects, installs its policies again and has charon rekey: traffic resumes without
    waiting for the next rekey. The outage is measured (1,000 packets a second)."""
    initiate(ike_bed)
    procs, d = ike_bed["procs"], ike_bed["tmp"] / GW1

    def restart():
        procs[(GW1, "espgw")].kill()
        procs[(GW1, "espgw")].wait()
        launch_espgw(GW1, d, procs)

    sent, got = paced_stream(ike_bed, 15, restart)
    outage = got["lost"] / 1000
    logs = (d / "charon.log").read_text()[-3000:]
    print(f"espgw restart: {got['lost']} of {sent} lost, outage {outage:.2f} s")
    assert got["packets"] > sent * 0.6 and got["duplicates"] == 0, (got, sent, logs)
    assert outage < 4.0, (got, sent, logs)
    k = show(ike_bed["ctls"][GW1], "keying")
    assert k["sessions"] == 1 and k["negotiated_sas"] == 2 and k["sas_installed"] >= 2, k


@pytest.mark.parametrize("ike_bed", ["espgw"], indirect=True)
def test_charon_restarted_under_espgw_flushes_and_renegotiates(ike_bed):
    """charon on gw1 killed and started again while espgw runs: its HELLO flushes the old
    SAs and policies, it negotiates anew, traffic resumes. The outage is measured."""
    initiate(ike_bed)
    procs, d = ike_bed["procs"], ike_bed["tmp"] / GW1
    ctl = ike_bed["ctls"][GW1]

    def restart():
        procs[(GW1, "charon")].kill()
        procs[(GW1, "charon")].wait()
        launch_charon(GW1, d, procs)

    sent, got = paced_stream(ike_bed, 15, restart)
    outage = got["lost"] / 1000
    print(f"charon restart: {got['lost']} of {sent} lost, outage {outage:.2f} s")
    k = show(ctl, "keying")
    assert k["sessions"] == 2, k
    assert k["negotiated_sas"] == 2, k
    # The stale SAs went with the old session: only the new pair is installed.
    sas = [s for s in show(ctl, "sa") if s["source"] == "ike"]
    assert len(sas) == 2, sas
    assert got["packets"] > sent * 0.6 and got["duplicates"] == 0, (got, sent)
    assert outage < 5.0, (got, sent)


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", dpd=True)], indirect=True)
def test_dead_peer_is_detected_and_the_tunnel_comes_back(ike_bed):
    """gw2's charon stopped: gw1 declares the peer dead (DPD every 2 s, two
    retransmissions), deletes its SAs from espgw, and re-establishes when it returns."""
    initiate(ike_bed)
    procs, ctl = ike_bed["procs"], ike_bed["ctls"][GW1]
    procs[(GW2, "charon")].kill()
    procs[(GW2, "charon")].wait()
    t0 = time.time()
    assert wait_for(lambda: show(ctl, "keying")["negotiated_sas"] == 0, timeout=30), \
        show(ctl, "keying")
    dead_after = time.time() - t0
    k = show(ctl, "keying")
    assert k["sas_deleted"] >= 2, k
    print(f"DPD: peer declared dead and SAs removed {dead_after:.1f} s after it stopped")
    assert dead_after < 20, dead_after
    launch_charon(GW2, ike_bed["tmp"] / GW2, procs)
    assert wait_for(lambda: show(ctl, "keying")["negotiated_sas"] == 2, timeout=30), \
        (ike_bed["tmp"] / GW1 / "charon.log").read_text()[-3000:]
    ping = ns(H1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", auth="cert")], indirect=True)
def test_x509_certificates_from_a_test_ca(ike_bed):
    """Both gateways authenticate with ECDSA certificates from one test CA."""
    initiate(ike_bed)
    vici = ike_bed["tmp"] / GW1 / "run/charon.vici"
    listed = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici}").stdout
    assert "ESTABLISHED" in listed, listed
    ping = ns(H1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", auth="cert", rogue=GW1)], indirect=True)
def test_a_certificate_from_another_ca_is_refused(ike_bed):
    """gw1's certificate comes from a CA gw2 does not trust: gw2 refuses the IKE_AUTH, no
    SA is installed in either espgw, and nothing passes."""
    tmp, ctls = ike_bed["tmp"], ike_bed["ctls"]
    vici = tmp / GW1 / "run/charon.vici"
    out = ns(GW1, "swanctl", "--initiate", "--child", "net", "--timeout", "15",
             "--uri", f"unix://{vici}", check=False)
    assert out.returncode != 0, out.stdout
    log = (tmp / GW2 / "charon.log").read_text()
    assert "no trusted" in log or "constraint check failed" in log or "AUTHENTICATION_FAILED" in log, log[-3000:]
    for ctl in ctls.values():
        k = show(ctl, "keying")
        assert k["negotiated_sas"] == 0 and k["sas_installed"] == 0, k
    ping = ns(H1, "ping", "-c", "2", "-i", "0.2", "-W", "1", "203.0.113.10", check=False)
    assert " 100% packet loss" in ping.stdout, ping.stdout


@pytest.mark.parametrize("ike_bed", [dict(peer="espgw", nat=True)], indirect=True)
def test_nat_between_the_gateways_is_traversed(ike_bed):
    """gw1 behind a masquerading NAT: charon detects it, both espgws carry ESP in UDP 4500
    (RFC 3948) through the NAT's mapping, and traffic flows both ways."""
    initiate(ike_bed)
    ctls = ike_bed["ctls"]
    for g, ctl in ctls.items():
        sas = [s for s in show(ctl, "sa") if s["source"] == "ike"]
        assert len(sas) == 2 and all(s["udp_encap"] for s in sas), (g, sas)
    # gw2 knows gw1 by the NAT's public address.
    assert all(s["remote"] == "192.0.2.100" for s in show(ctls[GW2], "sa")
               if s["source"] == "ike"), show(ctls[GW2], "sa")
    ping = ns(H1, "ping", "-c", "5", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout
    vici = ike_bed["tmp"] / GW1 / "run/charon.vici"
    listed = ns(GW1, "swanctl", "--list-sas", "--uri", f"unix://{vici}").stdout
    assert "NAT-T" in listed or "[4500]" in listed, listed


@pytest.mark.parametrize("ike_bed,suite", [
    (dict(peer="espgw", esp="aes256gcm16"), "aes-256-gcm"),
    (dict(peer="espgw", esp="chacha20poly1305"), "chacha20-poly1305"),
    (dict(peer="espgw", esp="aes128-sha256"), "aes-128-cbc+hmac-sha256-128"),
    (dict(peer="espgw", esp="aes256ctr-sha384"), "aes-256-ctr+hmac-sha384-192"),
    (dict(peer="espgw", esp="aes128ccm16"), "aes-128-ccm"),
], indirect=["ike_bed"], ids=["aes256gcm16", "chacha20poly1305", "aes128-sha256",
                             "aes256ctr-sha384", "aes128ccm16"])
def test_other_esp_proposals_negotiate_and_carry_traffic(ike_bed, suite):
    """strongSwan's proposal keywords for other suites: charon negotiates them, espgw
    installs the suite they name (algorithm and key lengths from the transform IDs), and
    traffic flows."""
    initiate(ike_bed)
    for ctl in ike_bed["ctls"].values():
        sas = [s for s in show(ctl, "sa") if s["source"] == "ike"]
        assert [s["algorithm"] for s in sas] == [suite, suite], sas
    ping = ns(H1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10", check=False)
    assert " 0% packet loss" in ping.stdout, ping.stdout


@pytest.mark.parametrize("peer,auth,nat", [("espgw", "psk", False), ("strongswan", "psk", False),
                                           ("espgw", "cert", False), ("espgw", "psk", True)],
                         ids=["espgw", "strongswan", "cert", "nat"])
def test_the_test_bed_negotiates_with_ikev2(peer, auth, nat):
    """`espgw-lab testbed demo --keying ike [--peer strongswan] [--auth cert] [--nat]`:
    charon and kernel-espgw beside each espgw gateway (or stock strongSwan as gateway 2)
    negotiate the SAs, hosts ping and send UDP through, and the transport link carries only
    ESP, IKE and ARP; with certificates, charon authenticated each side with ECDSA; behind
    the NAT box, the SAs are ESP in UDP."""
    from conftest import LAB
    r = sh(LAB, "testbed", "demo", "--keying", "ike", "--peer", peer, "--auth", auth,
           "--seconds", "1", *(["--nat"] if nat else []), check=False, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert ("aes-128-gcm in UDP" in out) == (nat or peer == "strongswan"), out
    assert re.search(r"gw1: negotiated out SA spi \"0x[0-9a-f]{8}\" reqid \d+ aes-128-gcm", out), out
    assert re.search(r"gw1: negotiated in SA spi", out), out
    assert (peer == "espgw") == ("gw2: negotiated out SA" in out), out
    assert "5 received, 0% packet loss" in out, out
    assert "the transport link carried only ESP" in out, out
    m = re.search(r"(\d+) ESP, (\d+) IKE, (\d+) ARP, (\d+) plaintext IP", out)
    assert m and int(m.group(1)) > 1000 and int(m.group(4)) == 0, out
    assert "test bed removed" in out, out
    log = pathlib.Path("/run/espgw-testbed/gw1-charon.log").read_text()
    method = "ECDSA_WITH_SHA256_DER" if auth == "cert" else "pre-shared key"
    assert re.search(rf"authentication of '192.0.2.2' with {method} successful", log), log
    left = sh("ip", "netns", "list").stdout
    assert "espgw-gw1" not in left, left
