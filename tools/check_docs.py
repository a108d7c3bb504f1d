#!/usr/bin/python3
"""The documentation names only files, flags and identifiers that exist.

    /usr/bin/python3 tools/check_docs.py [REPO_ROOT]

Reads README.md, docs/DESIGN.md and docs/USAGE.md and fails (exit 1, one line per finding: file:line, the
name, a hint) when one of them names
- a repository path that does not exist: a backticked, fenced or linked token that looks like a path (a
  known file extension, or a first folder that exists), resolved against the repository root, src/shardlm/
  (the docs write `model/block.cpp`), tests/, bench/ and, for links, the document's own folder; a bare file
  name (`zero.cpp`) is found by its name anywhere in the repository. Not checked: what a run writes or a
  user creates (runs/, data/, build/, ~/..., absolute paths, URLs, globs, <placeholders>, OUTPUTS below);
- a link to a heading of the same document (`#anchor`) that no heading gives;
- a command-line flag (`--name` in backticks or a fenced block) that the sources do not spell: as a string
  literal `"--name"` or a config key `"name"` (dashes to underscores) in src/, bench/ or tools/, or as a
  word of a script there; mpirun's own options (between `mpirun` and the program, or named in MPIRUN) are
  not shardlm's and are skipped;
- a C++ name written `ns::Name` or `Class::member` in backticks whose components are not all words of
  src/ (std:: and other libraries' names are skipped; `folder::Name`, where folder is one of
  src/shardlm/, must be a word of that folder), a GoogleTest `Suite.Name` that tests/ lacks, or an
  environment variable `SHARDLM_...` that no source, script or test reads;
and, in README.md and docs/DESIGN.md only, a line that says "issue N", a session or a date of work:
history lives in `git log` and bench/RESULTS.md.
"""
import bisect
import os
import re
import sys

DOCS = ["README.md", "docs/DESIGN.md", "docs/USAGE.md"]
NO_HISTORY = {"README.md", "docs/DESIGN.md"}

# Files and directories that the docs tell a user to create, or that a run writes: never in the repository.
OUTPUTS = {
    "cpu.json", "policy.json",  # calibrate --out, plan --policy examples
    "plan.svg", "model.json",   # plan --svg, plan --model examples
    "m.jsonl", "t.json",        # train --metrics, --trace examples
    "gpt2-hf", "llama-hf",      # export --out examples
    "summary.json", "memory_checkpoints.json",  # what a run directory holds
    "moe_balance.svg", "moe_load.svg",  # what `report` draws for a mixture of experts
    "unit_grad_norm.svg", "update_ratio.svg", "act_rms.svg",  # ... and of training health
}
# Prefixes of paths that a run, a build or a user makes.
OUTPUT_PREFIXES = ("runs/", "data/", "build/", "./build/", "~/", "/", "$", "http:", "https:", "mailto:")
# Libraries whose qualified names the docs quote (not ours).
FOREIGN_NAMESPACES = {"std", "torch", "nn", "dnnl", "MPI", "CLI", "nlohmann", "testing"}
# mpirun's options (Open MPI): a command's flags before the program it starts are mpirun's, these also
# where the docs name them alone.
MPIRUN = {"allow-run-as-root", "oversubscribe", "mca", "hostfile", "host", "np", "bind-to", "map-by", "rank-by",
          "report-bindings", "x", "tag-output", "timestamp-output", "machinefile", "use-hwthread-cpus"}
PATH_EXT = (".h", ".cpp", ".json", ".md", ".sh", ".py", ".svg", ".js")
# A path written without its extension names a module or a benchmark binary (`kernels/gemm/native`).
MODULE_EXT = (".h", ".cpp", ".py", ".sh")
# Upper-case words that stand for a name the user chooses (`--cluster FILE.json`).
PLACEHOLDER = re.compile(r"\b(?:FILE|DIR|NAME|PATH|OUT)\b")
ROOTS = ["", "src/shardlm", "tests", "bench"]
SKIP_DIRS = {".git", "build", "node_modules", "__pycache__"}

FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")
QUALIFIED = re.compile(r"(?<![\w:.])((?:[A-Za-z_]\w*::)+~?[A-Za-z_]\w*)")
GTEST = re.compile(r"^([A-Z]\w*)\.([A-Z]\w*)")
ENV = re.compile(r"\bSHARDLM_[A-Z0-9_]*[A-Z0-9]\b")
HISTORY = [
    (re.compile(r"\bissues? \d+", re.I), "names an issue"),
    (re.compile(r"\bsessions?\b", re.I), "names a session of work"),
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "names a date"),
]


def walk(root, sub):
    base = os.path.join(root, sub)
    for d, dirs, files in os.walk(base):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for f in files:
            yield os.path.join(d, f)


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


class Sources:
    """What the sources spell: words of src/, flags and config keys, test names, file names."""

    def __init__(self, root):
        self.words, self.flags, self.keys, self.test_words, self.basenames = set(), set(), set(), set(), set()
        self.folder_words = {}  # a folder of src/shardlm -> the words of its files (its namespace's names)
        self.env = set()        # SHARDLM_* names anywhere in the sources, scripts, tests and CMakeLists.txt
        literal = re.compile(r'"(?:[^"\\\n]|\\.)*"')
        for sub in ("src", "bench", "tools"):
            for path in walk(root, sub):
                text = read(path)
                if path.endswith((".h", ".cpp", ".hpp", ".cc")):
                    for lit in literal.findall(text):
                        self.flags.update(FLAG.findall(lit))
                        if re.fullmatch(r'"[a-z][a-z0-9_]*"', lit):
                            self.keys.add(lit[1:-1])
                    if sub == "src":
                        words = set(re.findall(r"[A-Za-z_]\w*", text))
                        self.words |= words
                        rel = os.path.relpath(path, os.path.join(root, "src", "shardlm")).split(os.sep)
                        if len(rel) > 1:
                            self.folder_words.setdefault(rel[0], set()).update(words)
                elif path.endswith((".sh", ".py", ".js")) and os.path.abspath(path) != os.path.abspath(__file__):
                    self.flags.update(FLAG.findall(text))  # (this file's examples are not flags of anything)
        for path in walk(root, "tests"):
            if path.endswith((".cpp", ".h")):
                self.test_words.update(re.findall(r"[A-Za-z_]\w*", read(path)))
        for path in walk(root, ""):
            self.basenames.add(os.path.basename(path))
        for sub in ("src", "bench", "tools", "tests", "CMakeLists.txt"):
            paths = [os.path.join(root, sub)] if sub.endswith(".txt") else walk(root, sub)
            for path in paths:
                if path.endswith((".h", ".cpp", ".sh", ".py", ".txt")):
                    self.env.update(ENV.findall(read(path)))

    def has_flag(self, name):
        return name in self.flags or name.replace("-", "_") in self.keys or name in MPIRUN


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(token[:m.start()] + alt + token[m.end():])
    return out


class Checker:
    def __init__(self, root):
        self.root = root
        self.src = Sources(root)
        self.subdirs = set()
        for r in ROOTS:
            d = os.path.join(root, r)
            if os.path.isdir(d):
                self.subdirs.update(x for x in os.listdir(d) if os.path.isdir(os.path.join(d, x)))
        self.findings = []

    def report(self, doc, line, name, hint):
        self.findings.append((DOCS.index(doc) if doc in DOCS else len(DOCS), line, f"{doc}:{line}: {name}: {hint}"))

    # -- paths -----------------------------------------------------------------------------------------
    def looks_like_path(self, tok):
        if not re.fullmatch(r"[\w.~${}<>*,/-]+", tok) or not re.search(r"[A-Za-z]", tok):
            return False
        if tok.endswith(PATH_EXT) and not tok.startswith("."):
            return True
        first = tok.split("/")[0]
        return "/" in tok and first in self.subdirs | {"src", "tools", "docs", "configs", "fuzz"}

    def path_exists(self, tok, docdir, link):
        rel = tok.rstrip("/")
        if "/" not in rel and not link:
            return rel in self.src.basenames or any(
                os.path.exists(os.path.join(self.root, r, rel)) for r in ROOTS)
        bases = [os.path.join(self.root, r) for r in ROOTS] + [os.path.join(self.root, docdir)]
        exts = ("",) if link or os.path.splitext(rel)[1] else ("",) + MODULE_EXT
        return any(os.path.exists(os.path.normpath(os.path.join(b, rel)) + e) for b in bases for e in exts)

    def check_path(self, doc, line, tok, link=False):
        tok = tok.strip("()[],;:.'\"") if not link else tok
        if link:
            tok = tok.split("#")[0]
            if not tok:
                return
        if not tok or tok.startswith(OUTPUT_PREFIXES) or re.search(r"[*<>]", tok) or PLACEHOLDER.search(tok):
            return
        if not link and not self.looks_like_path(tok):
            return
        for t in expand_braces(tok):
            if os.path.basename(t.rstrip("/")) in OUTPUTS or t in OUTPUTS:
                continue
            if not self.path_exists(t, os.path.dirname(doc), link):
                self.report(doc, line, t, "no such file or folder (looked in the repository root, src/shardlm/, "
                            "tests/, bench/" + (", " + os.path.dirname(doc) + "/" if link else "") +
                            "); name the current path, or add a file a user creates to OUTPUTS in tools/check_docs.py")

    # -- flags and names --------------------------------------------------------------------------------
    def check_command(self, doc, line, text):
        """Flags of one command line (or an inline code span)."""
        words = text.split()
        mpirun = False
        skip_next = False
        for i, w in enumerate(words):
            if w == "mpirun":
                mpirun = True
                continue
            if mpirun and ("shardlm" in w or w.endswith((".sh", ".py")) or w in ("bash", "python3")):
                mpirun = False
            if skip_next:
                skip_next = False
                continue
            for name in FLAG.findall(w):
                if mpirun:
                    continue
                if name == "mpi-arg":
                    skip_next = True
                if not self.src.has_flag(name):
                    self.report(doc, line, "--" + name, "no source spells this flag (\"--" + name + "\" or the config key \"" +
                                name.replace("-", "_") + "\" in src/, bench/, tools/); name the current flag")

    def check_names(self, doc, line, span):
        for q in QUALIFIED.findall(span):
            parts = q.split("::")
            if parts[0] in FOREIGN_NAMESPACES:
                continue
            missing = [p.lstrip("~") for p in parts if p.lstrip("~") not in self.src.words]
            if missing:
                self.report(doc, line, q, f"{', '.join(missing)} is not a word of src/; name the current identifier")
            elif parts[0] in self.src.folder_words and parts[1].lstrip("~") not in self.src.folder_words[parts[0]]:
                # a folder's namespace (shardlm::<folder>, core's names unqualified) names what the folder defines
                self.report(doc, line, q, f"{parts[1]} is not in src/shardlm/{parts[0]}/; name the namespace that has it")
        for m in re.finditer(r"\b(SHARDLM_[A-Z0-9_]*)(\*?)", span):
            name, star = m.group(1), m.group(2)
            known = any(e.startswith(name) for e in self.src.env) if star else name in self.src.env
            if not known:
                self.report(doc, line, name + star, "no source, script or test reads this variable; name the current one")
        m = GTEST.match(span.strip())
        if m and re.fullmatch(r"[A-Z]\w*\.[A-Z]\w*\W*", span.strip()):
            if m.group(1) not in self.src.test_words or m.group(2) not in self.src.test_words:
                self.report(doc, line, m.group(0), "no such test in tests/; name the current test")

    # -- one document -----------------------------------------------------------------------------------
    def check_doc(self, doc):
        text = read(os.path.join(self.root, doc))
        if not text:
            self.report(doc, 0, doc, "cannot read the file")
            return
        lines = text.split("\n")
        # fenced blocks: every line a command (a comment's flags too); prose without them
        prose = list(lines)
        anchors, fence = {}, None
        for i, ln in enumerate(lines):
            s = ln.strip()
            if s.startswith("```"):
                fence = None if fence is not None else s[3:].strip()
                prose[i] = ""
                continue
            if fence is not None:
                prose[i] = ""
                if fence in ("", "bash", "sh", "console", "text"):
                    self.check_command(doc, i + 1, ln)
                    for tok in ln.split():
                        self.check_path(doc, i + 1, tok)
                continue
            h = re.match(r"#{1,6}\s+(.*)", ln)
            if h:
                a = slug(h.group(1))
                n = anchors.get(a, 0)
                anchors[a] = n + 1
                if n:
                    anchors[f"{a}-{n}"] = 1
            if doc in NO_HISTORY:
                for pat, hint in HISTORY:
                    m = pat.search(ln)
                    if m:
                        self.report(doc, i + 1, m.group(0), hint + ": history lives in git log and bench/RESULTS.md")
        body = "\n".join(prose)
        starts, pos = [], 0
        for ln in prose:
            starts.append(pos)
            pos += len(ln) + 1

        def line_of(offset):
            return bisect.bisect_right(starts, offset)

        # links, then inline code (which may run over lines)
        for m in re.finditer(r"\]\(([^)\s]+)\)", body):
            target, line = m.group(1), line_of(m.start())
            if target.startswith("#"):
                if target[1:] not in anchors:
                    self.report(doc, line, target, "no heading of this file has this anchor")
            elif not target.startswith(("http:", "https:", "mailto:")):
                self.check_path(doc, line, target, link=True)
        for m in re.finditer(r"(`+)(.+?)\1", body, re.S):
            span, line = m.group(2), line_of(m.start())
            self.check_command(doc, line, span)
            self.check_names(doc, line, span)
            for tok in span.split():
                self.check_path(doc, line, tok)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    c = Checker(root)
    for doc in DOCS:
        c.check_doc(doc)
    for _, _, f in sorted(c.findings):
        print(f)
    if c.findings:
        print(f"check_docs: {len(c.findings)} name(s) in the docs do not exist", file=sys.stderr)
        return 1
    print(f"check_docs: {', '.join(DOCS)}: every file, flag and name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
