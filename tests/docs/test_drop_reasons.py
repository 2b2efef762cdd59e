"""The README's table of drop reasons names exactly the reasons the gateway counts: the
`DropReason` list in crates/core/src/counters.rs (each `Variant => "name", "meaning";`), so
an operator reading a counter in `espgw show stats` or Prometheus finds it explained."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def counted():
    source = (ROOT / "crates" / "core" / "src" / "counters.rs").read_text(encoding="utf-8")
    return re.findall(r'^\s*[A-Z]\w* => "([a-z_]+)", "', source, re.M)


def documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Drop reasons\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, re.M)


def test_every_counted_reason_is_documented_once_and_nothing_else():
    names = counted()
    assert len(names) >= 30 and len(set(names)) == len(names)
    rows = documented()
    assert len(set(rows)) == len(rows), "a reason documented twice"
    assert sorted(rows) == sorted(names)
