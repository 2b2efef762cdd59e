"""The configurations the README shows are configurations espgw loads: each example block of
the native TOML, the DPDK ipsec-secgw lines and the setkey scripts, cut out of README.md as a
reader would copy it, passes `espgw check`, which reports as many ports, SAs and routes as the
block itself writes. (The native format's reference block once set two top-level keys after
a `[[port]]` header, where TOML reads them as the port's: copied, it did not load.)"""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_blocks():
    """(heading, info string, text) of every fenced block of the README, in order."""
    blocks = []
    heading, fence, lines = "", None, []
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if fence is None:
            m = re.match(r"^(#{1,6})\s+(.*)$", line)
            if m:
                heading = m.group(2).strip()
            elif line.startswith("```"):
                fence, lines = line[3:].strip(), []
        elif line.startswith("```"):
            blocks.append((heading, fence, "\n".join(lines) + "\n"))
            fence = None
        else:
            lines.append(line)
    return blocks


def blocks_under(heading):
    found = [text for h, _, text in readme_blocks() if h == heading]
    assert found, f"no code block under the README heading {heading!r}"
    return found


def check(espgw, tmp_path, text, fmt, *flags):
    cfg = tmp_path / f"readme.{fmt}"
    cfg.write_text(text)
    cfg.chmod(0o600)
    r = subprocess.run([str(espgw), "check", "--format", fmt, *flags, "--config", str(cfg)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"the README's {fmt} example does not load:\n{r.stderr}"
    summary = re.search(r"^ok: (\d+) ports, (\d+) SAs, (\d+) outbound and (\d+) inbound "
                        r"policies, (\d+) routes$", r.stdout, re.M)
    assert summary, r.stdout
    ports, sas, out_pol, in_pol, routes = map(int, summary.groups())
    return {"ports": ports, "sas": sas, "policies": out_pol + in_pol, "routes": routes}


def count(text, pattern):
    return len(re.findall(pattern, text, re.M))


def test_the_native_formats_reference_block_loads(espgw, tmp_path):
    (text,) = [t for t in blocks_under("The native format (TOML)")]
    got = check(espgw, tmp_path, text, "native")
    assert got == {"ports": count(text, r"^\[\[port\]\]"), "sas": count(text, r"^\[\[sa\]\]"),
                   "policies": count(text, r"^\[\[policy\]\]"),
                   "routes": count(text, r"^\[\[route\]\]")}
    assert got["sas"] == 1 and got["policies"] == 1


def test_the_ikev2_sections_espgw_toml_loads_without_sas(espgw, tmp_path):
    (text,) = [t for t in blocks_under("IKEv2 through strongSwan's charon")
               if t.startswith("# /etc/espgw/espgw.toml")]
    got = check(espgw, tmp_path, text, "native")
    assert got == {"ports": count(text, r"^\[\[port\]\]"), "sas": 0, "policies": 0,
                   "routes": count(text, r"^\[\[route\]\]")}


def test_the_dpdk_secgw_example_loads(espgw, tmp_path):
    (text,) = blocks_under("DPDK ipsec-secgw syntax")
    got = check(espgw, tmp_path, text, "secgw")
    assert got["sas"] == count(text, r"^sa ") == 1
    assert got["policies"] == count(text, r"^sp ")
    assert got["routes"] == count(text, r"^rt ")


@pytest.mark.parametrize("index", [0, 1])
def test_the_setkey_examples_load(espgw, tmp_path, index):
    text = blocks_under("setkey scripts")[index]
    # The second is the classic ESP-inside-AH example with 3DES and HMAC-MD5 (RFC 8221).
    legacy = ["--allow-legacy-crypto"] if "3des-cbc" in text else []
    got = check(espgw, tmp_path, text, "setkey", *legacy)
    assert got["sas"] == count(text, r"^add ") >= 2
    assert got["policies"] == count(text, r"^spdadd ") == 2


def native_format_fields():
    """Every key of the native format: the fields of the `Raw*` structs serde reads."""
    source = (ROOT / "crates" / "config" / "src" / "native" / "mod.rs").read_text(encoding="utf-8")
    fields = set()
    for body in re.findall(r"struct Raw\w+ \{(.*?)\n\}", source, re.S):
        fields |= set(re.findall(r"^\s+(\w+): ", body, re.M))
    return fields


def test_the_native_reference_block_shows_every_key(espgw):
    (text,) = blocks_under("The native format (TOML)")
    fields = native_format_fields()
    assert {"burst", "workers", "spi", "replay_window", "soft_packets", "via"} <= fields
    missing = [f for f in sorted(fields)
               if not re.search(rf"(^|[\s{{#,]){f}\s*=|^\[\[{f}\]\]", text, re.M)]
    assert missing == [], f"keys the reference block does not show: {missing}"
