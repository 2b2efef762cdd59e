"""No error message shows key bytes (issue 17): a key with a distinctive pattern, typed
wrongly in each of the three configuration formats, is refused with file, line and field,
and no 8-character piece of it (hex, or DPDK's colon form) appears in what espgw prints."""
import subprocess

import pytest

KEY = bytes.fromhex("5a3ce17b" * 4)
SALT = bytes.fromhex("9d2f6b04")
HEX = (KEY + SALT).hex()
COLONS = ":".join(f"{b:02x}" for b in KEY + SALT)


def pieces():
    for text in (HEX, COLONS):
        for i in range(len(text) - 7):
            yield text[i:i + 8]


NATIVE = """[[sa]]
direction = "out"
spi = 0x1001
mode = "transport"
aead = "aes-128-gcm"
{key}
"""

CASES = {
    # TOML that does not parse at the key's value (no quotes).
    "native-unquoted": ("gw.toml", NATIVE.format(key=f"key = 0x{HEX}"), "key"),
    # A character that is not hex in the middle.
    "native-not-hex": ("gw.toml", NATIVE.format(key=f'key = "0x{HEX[:10]}zz{HEX[12:]}"'), "key"),
    # The key given to another field.
    "native-wrong-field": ("gw.toml", NATIVE.format(key=f'key = "0x{HEX}"').replace(
        'mode = "transport"', f'mode = "{HEX}"'), "mode"),
    # A space splits the DPDK key: its second half reads as a keyword.
    "secgw-split": ("ep0.cfg", "sa out 4097 aead_algo aes-128-gcm aead_key "
                    f"{COLONS[:23]} {COLONS[24:]} mode transport\n", "sa"),
    # setkey: a quoted key without its closing quote, and hex without 0x.
    "setkey-unterminated": ("ipsec.conf", "add 192.0.2.1 192.0.2.2 esp 4097 -E aes-gcm-16 "
                            f'"{(KEY + SALT).hex()};\n', None),
    "setkey-no-0x": ("ipsec.conf", "add 192.0.2.1 192.0.2.2 esp 4097 -E aes-gcm-16 "
                     f"{HEX};\n", "-E key"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistyped_key_is_refused_without_showing_it(espgw, tmp_path, case):
    name, text, field = CASES[case]
    cfg = tmp_path / name
    cfg.write_text(text)
    r = subprocess.run([str(espgw), "check", "--config", str(cfg)], capture_output=True,
                       text=True)
    assert r.returncode != 0, r.stdout
    out = r.stdout + r.stderr
    assert str(cfg) in out
    if field:
        assert f": {field}:" in out, out
    leaked = [p for p in pieces() if p in out]
    assert not leaked, f"key bytes in the message: {out}"
