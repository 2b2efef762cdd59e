"""Static keys never repeat a nonce across restarts, and replays stay replays: the state
directory of `espgw pcap` (the offline gateway) checked from the outside, with scapy
reading the ESP it wrote (issue 17: two runs with one configuration used to send SPI
0x1001 seq 1, IV 00..01, twice).

The live gateway's restarts (SIGKILL under traffic) and reloads are in
tests/live/test_sequence_state.py."""
import json
import os
import pathlib
import subprocess

from scapy.all import IP, Ether, rdpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

# The built-in configuration's outbound SA (public demonstration key).
SPI = 0x1001
KEY = bytes(range(16)) + bytes.fromhex("cafe0001")


def default_configs(espgw, tmp):
    gw1, gw2 = tmp / "gw1.toml", tmp / "gw2.toml"
    gw1.write_text(subprocess.run([str(espgw), "default-config"], capture_output=True,
                                  text=True, check=True).stdout)
    gw2.write_text(subprocess.run([str(espgw), "default-config", "--peer"],
                                  capture_output=True, text=True, check=True).stdout)
    return gw1, gw2


def lab_of(espgw):
    """The espgw-lab binary (its traffic generator): ESPGW_LAB, else beside espgw."""
    path = os.environ.get("ESPGW_LAB")
    return pathlib.Path(path) if path else pathlib.Path(espgw).with_name("espgw-lab")


def plaintext(espgw, tmp, count=20):
    path = tmp / "plain.pcap"
    subprocess.run([str(lab_of(espgw)), "gen", "--output", str(path), "--count", str(count),
                    "--size", "200"], check=True, capture_output=True)
    return path


def pcap(espgw, cfg, direction, inp, out, state, *extra, check=True):
    r = subprocess.run([str(espgw), "pcap", "--config", str(cfg), "--direction", direction,
                        "--input", str(inp), "--output", str(out), "--json",
                        "--state-dir", str(state), *extra],
                       capture_output=True, text=True)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def esp_numbers(path):
    """(SPI, sequence number, IV) of every ESP packet in a capture."""
    out = []
    for frame in rdpcap(str(path)):
        esp = frame[IP][ESP]
        out.append((esp.spi, esp.seq, bytes(esp.data[:8])))
    return out


def test_two_runs_with_one_key_never_repeat_a_sequence_number_or_iv(espgw, tmp_path):
    gw1, _ = default_configs(espgw, tmp_path)
    inp = plaintext(espgw, tmp_path)
    state = tmp_path / "state"
    runs = []
    for i in range(3):
        out = tmp_path / f"esp-{i}.pcap"
        pcap(espgw, gw1, "outbound", inp, out, state)
        runs.append(esp_numbers(out))
    assert all(len(r) == 20 for r in runs)
    seen = [n[:2] for r in runs for n in r]
    assert len(set(seen)) == len(seen), "an (SPI, sequence number) pair repeats"
    ivs = [n[2] for r in runs for n in r]
    assert len(set(ivs)) == len(ivs), "an AES-GCM IV repeats under the static key"
    # Each run starts above every number the one before reserved.
    assert runs[0][0][1] == 1
    assert runs[1][0][1] > runs[0][-1][1] and runs[2][0][1] > runs[1][-1][1]
    # And every packet of the later runs is still valid ESP for an independent peer.
    sa = SecurityAssociation(ESP, spi=SPI, crypt_algo="AES-GCM", crypt_key=KEY,
                             tunnel_header=IP(src="192.0.2.1", dst="192.0.2.2"))
    for frame in rdpcap(str(tmp_path / "esp-2.pcap")):
        inner = sa.decrypt(frame[IP])
        assert inner.dst == "203.0.113.20"


def test_the_state_follows_the_key_not_the_spi(espgw, tmp_path):
    gw1, _ = default_configs(espgw, tmp_path)
    inp = plaintext(espgw, tmp_path, 5)
    state = tmp_path / "state"
    pcap(espgw, gw1, "outbound", inp, tmp_path / "a.pcap", state)
    renumbered = tmp_path / "renumbered.toml"
    renumbered.write_text(gw1.read_text().replace("spi = 0x00001001", "spi = 0x00001777")
                          .replace('sa = "gw1-to-gw2"', 'sa = "gw1-to-gw2"'))
    pcap(espgw, renumbered, "outbound", inp, tmp_path / "b.pcap", state)
    a, b = esp_numbers(tmp_path / "a.pcap"), esp_numbers(tmp_path / "b.pcap")
    assert {n[0] for n in b} == {0x1777}
    assert min(n[1] for n in b) > max(n[1] for n in a), "same key, new SPI: no reused IV"
    assert not {n[2] for n in a} & {n[2] for n in b}


def test_a_replayed_capture_after_a_restart_is_dropped_as_replay(espgw, tmp_path):
    gw1, gw2 = default_configs(espgw, tmp_path)
    inp = tmp_path / "plain-back.pcap"
    subprocess.run([str(lab_of(espgw)), "gen", "--output", str(inp), "--count", "10",
                    "--src", "203.0.113.20", "--dst", "198.51.100.10"],
                   check=True, capture_output=True)
    esp = tmp_path / "esp.pcap"
    pcap(espgw, gw2, "outbound", inp, esp, tmp_path / "peer-state")
    state = tmp_path / "state"
    first = json.loads(pcap(espgw, gw1, "inbound", esp, tmp_path / "d1.pcap", state).stdout)
    assert first["decrypted"] == 10
    # The gateway "restarts" (a new process) and sees the same capture again.
    again = json.loads(pcap(espgw, gw1, "inbound", esp, tmp_path / "d2.pcap", state).stdout)
    assert again["decrypted"] == 0
    assert again["drops"]["replay"] == 10
    # Control: with its state gone (what the README warns against), the replay passes.
    fresh = json.loads(pcap(espgw, gw1, "inbound", esp, tmp_path / "d3.pcap",
                            tmp_path / "other").stdout)
    assert fresh["decrypted"] == 10


def test_gcm_without_a_usable_state_directory_is_refused(espgw, tmp_path):
    gw1, _ = default_configs(espgw, tmp_path)
    inp = plaintext(espgw, tmp_path, 2)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "out.pcap"
    r = pcap(espgw, gw1, "outbound", inp, out, blocker / "state", check=False)
    assert r.returncode != 0
    assert f"state directory {blocker / 'state'}" in r.stderr
    assert "gw1-to-gw2" in r.stderr and "aes-128-gcm" in r.stderr
    assert "--volatile-keys" in r.stderr
    assert not out.exists(), "nothing was sent"


def test_volatile_keys_is_the_named_switch_and_warns(espgw, tmp_path):
    gw1, _ = default_configs(espgw, tmp_path)
    inp = plaintext(espgw, tmp_path, 3)
    firsts = []
    for i in range(2):
        out = tmp_path / f"v{i}.pcap"
        r = pcap(espgw, gw1, "outbound", inp, out, tmp_path / "unused", "--volatile-keys")
        assert "warning: --volatile-keys" in r.stderr
        firsts.append(esp_numbers(out)[0][1])
    assert firsts == [1, 1], "without state every start begins again (the switch's danger)"
    assert not (tmp_path / "unused").exists()


def test_cbc_without_a_usable_state_directory_warns(espgw, tmp_path):
    cfg = tmp_path / "cbc.toml"
    gw1, _ = default_configs(espgw, tmp_path)
    cfg.write_text(gw1.read_text().replace(
        'aead = "aes-128-gcm"\nkey = "0x000102030405060708090a0b0c0d0e0fcafe0001"',
        'cipher = "aes-128-cbc"\ncipher_key = "0x000102030405060708090a0b0c0d0e0f"\n'
        'integrity = "hmac-sha256-128"\n'
        'integrity_key = "0x' + "11" * 32 + '"'))
    assert "aes-128-cbc" in cfg.read_text()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = pcap(espgw, cfg, "outbound", plaintext(espgw, tmp_path, 2), tmp_path / "o.pcap",
             blocker / "state")
    assert "warning:" in r.stderr and "not persisted" in r.stderr


def test_a_damaged_state_file_is_refused_naming_it(espgw, tmp_path):
    gw1, _ = default_configs(espgw, tmp_path)
    inp = plaintext(espgw, tmp_path, 2)
    state = tmp_path / "state"
    pcap(espgw, gw1, "outbound", inp, tmp_path / "o1.pcap", state)
    files = [f for f in os.listdir(state) if f.endswith(".out")]
    assert len(files) == 1
    assert bytes(KEY).hex() not in files[0], "the file is named by a hash, not the key"
    (state / files[0]).write_text("garbage\n")
    r = pcap(espgw, gw1, "outbound", inp, tmp_path / "o2.pcap", state, check=False)
    assert r.returncode != 0
    assert str(state / files[0]) in r.stderr and "refusing to guess" in r.stderr
