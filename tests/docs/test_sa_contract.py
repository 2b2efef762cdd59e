"""docs/sa-contract.md is what another IKE daemon's author implements the keying protocol
from: its Kinds and Fields tables must give every message kind and field type the numbers
crates/keying/src/message/mod.rs (and so espgw) uses, and the plugin's C enums
(plugins/kernel-espgw/kernel_espgw_ipsec.c) the same, name for name."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def rust_consts(module):
    """NAME -> number of `pub mod MODULE { pub const NAME: uN = N; ... }`."""
    source = (ROOT / "crates/keying/src/message/mod.rs").read_text(encoding="utf-8")
    body = re.search(rf"pub mod {module} \{{(.*?)\n\}}", source, re.S).group(1)
    return {n: int(v, 0) for n, v in re.findall(r"pub const (\w+): u\d+ = (\w+);", body)}


def doc_table(heading):
    """NAME -> number from a table of the contract whose first columns are `| 2, 3 | A, B |`."""
    text = (ROOT / "docs/sa-contract.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for numbers, names in re.findall(r"^\| ([0-9a-fx, ]+) \| ([A-Z_, ]+) \|", section, re.M):
        nums = [int(n, 0) for n in numbers.split(",")]
        labels = [n.strip() for n in names.split(",")]
        assert len(nums) == len(labels), (numbers, names)
        out.update(zip(labels, nums))
    return out


def c_enum(prefix):
    """NAME -> number of the plugin's `enum { P_A = 1, P_B, ... }` (implicit values counted)."""
    source = (ROOT / "plugins/kernel-espgw/kernel_espgw_ipsec.c").read_text(encoding="utf-8")
    for body in re.findall(r"enum \{(.*?)\}", source, re.S):
        names = re.findall(rf"\b{prefix}(\w+)(?:\s*=\s*(\w+))?", body)
        if names:
            out, value = {}, -1
            for name, explicit in names:
                value = int(explicit, 0) if explicit else value + 1
                out[name] = value
            return out
    raise AssertionError(f"no enum of {prefix}* in the plugin")


def test_the_kinds_table_matches_the_code():
    kinds = rust_consts("kind")
    assert len(kinds) == 15 and kinds["EXPIRE"] == 0x40
    assert doc_table("Kinds") == kinds
    assert c_enum("K_") == kinds


def test_the_fields_table_matches_the_code():
    fields = rust_consts("field")
    assert len(fields) >= 31 and fields["MESSAGE"] == 31
    assert doc_table("Fields") == fields
    assert c_enum("F_") == fields
