"""Every relative link in the project's Markdown resolves: the file exists and, where the
link names a heading (`file.md#anchor`), the file has that heading, with the anchor GitHub
derives from it. The README and docs/performance.md link into each other's sections by
anchor; a heading renamed without its links breaks them silently otherwise."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files():
    """The Markdown the project ships: the README, SECURITY.md and everything under docs/,
    crates/ and plugins/."""
    files = sorted(ROOT.glob("*.md"))
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "crates").rglob("*.md"))
    files += sorted((ROOT / "plugins").rglob("*.md"))
    return [f for f in files if "target" not in f.relative_to(ROOT).parts]


def prose_lines(text):
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation (backquotes, colons,
    parentheses, commas, dots, slashes) dropped, each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a Markdown file; a repeated heading gets -1, -2, ..."""
    seen = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def shown(path):
    """A path as a message names it: from the repository's root, else its name alone."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken_links(path):
    """The relative links of `path` that name a missing file or a missing heading."""
    bad = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            link = m.group(1)
            if EXTERNAL.match(link):
                continue
            file_part, _, anchor = link.partition("#")
            target = (path.parent / file_part).resolve() if file_part else path
            if path.is_relative_to(ROOT) and not target.is_relative_to(ROOT):
                bad.append(f"{link}: outside the repository (a fresh clone has no such file)")
            elif not target.exists():
                bad.append(f"{link}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                bad.append(f"{link}: no such heading in {shown(target)}")
    return bad


def test_slug_matches_githubs_anchors():
    assert slug("The test bed: `espgw-lab testbed`") == "the-test-bed-espgw-lab-testbed"
    assert slug("Against DPDK ipsec-secgw, one core (issue 14)") == (
        "against-dpdk-ipsec-secgw-one-core-issue-14")
    assert slug("IKEv2 through strongSwan's charon") == "ikev2-through-strongswans-charon"


def test_a_broken_link_is_found(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Top\n\n## Real: `heading`\n\n[ok](#real-heading) [gone](#no-heading) "
                   "[file](missing.md) [web](https://example.org/x#y)\n\n"
                   "```sh\n# not a heading\n[in code](#not-a-heading)\n```\n")
    assert broken_links(doc) == ["#no-heading: no such heading in a.md", "missing.md: no such file"]


def test_every_relative_link_resolves():
    files = markdown_files()
    assert any(f.name == "performance.md" for f in files)
    problems = [f"{f.relative_to(ROOT)}: {b}" for f in files for b in broken_links(f)]
    assert problems == []


def test_the_measurement_records_contents_list_every_section():
    """docs/performance.md grows a section a session; its Contents must name each one."""
    path = ROOT / "docs" / "performance.md"
    lines = list(prose_lines(path.read_text(encoding="utf-8")))
    sections = [line[3:] for line in lines if line.startswith("## ")]
    start = next(i for i, line in enumerate(lines) if line.startswith("**Contents**"))
    listed = []
    for line in lines[start + 2:]:
        m = re.match(r"^- \[.*\]\(#([^)]+)\)$", line)
        if not m:
            break
        listed.append(m.group(1))
    assert sections
    assert listed == [slug(s) for s in sections]


REPO_PATH = re.compile(r"`((?:crates|scripts|tests|docs|packaging|fuzz|plugins|\.ci)/\w[\w./-]*)`")


def generated(path):
    """Whether `path` lies under a folder the root .gitignore names (`/fuzz/artifacts`):
    made by a run, absent from a fresh clone, and still a right name."""
    ignored = [line.strip().strip("/") for line in
               (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
               if line.startswith("/")]
    return any(path.rstrip("/") == i or path.startswith(i + "/") for i in ignored)


def test_every_repository_path_named_in_the_docs_exists():
    """A path in backquotes from the repository's root (`crates/core/src/spd.rs`) names a
    file or folder a newcomer can open: none renamed or moved since the text was written."""
    missing = []
    for f in markdown_files():
        for line in prose_lines(f.read_text(encoding="utf-8")):
            missing += [f"{f.relative_to(ROOT)}: {p}" for p in REPO_PATH.findall(line)
                        if not (ROOT / p).exists() and not generated(p)]
    assert missing == []


def test_generated_folders_are_told_apart():
    assert generated("fuzz/artifacts/") and generated("fuzz/corpus/inbound")
    assert not generated("fuzz/src/lib.rs") and not generated("fuzz/artifactsx")
