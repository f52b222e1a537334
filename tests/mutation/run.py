"""Mutation testing of the core (`make mutation`; issue 31): each module of modules.toml is
mutated by mutmut 3 against its own test files, in a temporary copy of the repository (the
working tree is never touched: mutmut writes its mutants/ there), within a time budget.

    python tests/mutation/run.py                          # every module of modules.toml
    python tests/mutation/run.py codecs/validation.py     # one (path below src/queuewire)
    python tests/mutation/run.py --ref HEAD ...           # a commit instead of the working tree
    python tests/mutation/run.py --rescore                # equivalent/ again, on the last reports
    python tests/mutation/run.py --open codecs/quicx.py   # only what the last report left open

``--open`` runs only the mutants the module's last report left open (survived, not run
because the budget ended, or without a test then: a new test may run their function) and
merges their new statuses into that report: the loop of writing a test for a survivor and
checking that it kills it costs minutes, not the hours of a full run.
When the module's source changed since that report, the mutants of every function whose text
changed (or that is new) are run too, and their old statuses dropped: mutmut numbers mutants per
function, so the mutants of an unchanged function are the same mutants.

Per module it prints and writes reports/mutation/<module>.txt and .json: mutants, killed,
survived, timeouts, "no tests" (no test of the module runs the function: listed apart, not in
the score), not run (the budget ended), equivalent (excluded, with the reason), and
score = (killed + timeouts) / (killed + timeouts + survived) with equivalent mutants left
out; then every survivor with file:line, its function and its diff.

Equivalent mutants (they change no behaviour) are listed in equivalent/<module>.txt beside this
file (one file per module, named like its report). An entry names the module and the function
and quotes the removed and added lines of the mutant's diff; it matches by that text, never by
mutmut's mutant number, so it cannot point at another mutant after an edit. An entry that
matches no surviving mutant is reported as stale.

The mutants are only what mutmut 3 mutates: the bodies of functions and methods (not code at
module or class level, not functions with decorators other than staticmethod/classmethod, and
not lines marked ``# pragma: no mutate``).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import difflib
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = HERE / "modules.toml"
EQUIVALENT = HERE / "equivalent"  # one <module with dots>.txt per module
REPORTS = ROOT / "reports" / "mutation"

# mutmut's statuses, grouped for the score. "segfault" is mutmut's name for a worker killed by
# a signal (SIGKILL after its CPU limit, a crash): the mutant broke the run, so it counts as
# killed, like a timeout. "suspicious" (an exit code mutmut does not know) is listed apart.
KILLED = {"killed", "caught by type check"}
TIMEOUT = {"timeout", "segfault"}
SURVIVED = {"survived"}
NO_TESTS = {"no tests", "skipped"}
NOT_RUN = {"not checked", "check was interrupted by user"}

# What mutmut's fork server imports once, before it forks a worker per mutant: third-party
# modules and queuewire's packages (so that a worker only collects and runs its tests). mutmut
# picks the active mutant at call time, inside each mutated function, so a function imported
# here still runs its mutant. Never the test files: what a test file builds at import
# (``VALIDATOR = BunqueueValidator(PROFILE)``) must be built in the worker, by the mutant. (No
# queuewire module calls a core function at import time; one that did would have to go.)
PRELOAD = ["pytest", "_pytest.python", "hypothesis", "hypothesis.strategies", "_hypothesis_pytestplugin",
           "pytest_asyncio", "pytest_asyncio.plugin", "msgspec", "jsonschema_rs", "jsonschema", "yaml",
           "construct", "aiohttp", "sortedcontainers", "croniter", "click", "rich", "msgpack",
           "qw_mutation_preload_spec", "queuewire.codecs.bunqueue", "queuewire.codecs.validation",
           "queuewire.codecs.bunqueue_typed", "queuewire.codecs.quicx", "queuewire.client",
           "queuewire.client.bunqueue_session", "queuewire.client.quicx",
           "queuewire.reference_server.bunqueue", "queuewire.reference_server.quicx",
           "queuewire.conformance.pytest_plugin"]
PRELOAD_SPEC = """from queuewire.spec import load_profile, profile_names

for _name in profile_names():
    load_profile(_name)
"""


@dataclass
class Mutant:
    name: str
    function: str  # Class.method or function
    status: str
    line: int | None
    diff: str
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    reason: str | None = None  # equivalent: why

    def one_line(self) -> str:
        old = " / ".join(self.removed) or "(nothing)"
        new = " / ".join(self.added) or "(nothing)"
        return f"- {old}  =>  + {new}"


@dataclass
class Exclusion:
    module: str
    function: str
    removed: list[str]
    added: list[str]
    reason: str
    where: str  # <file>:<line>
    used: bool = False


# ---------------------------------------------------------------------------------------------
# modules.toml and equivalent/


def load_modules() -> list[dict]:
    data = tomllib.loads(MODULES.read_text(encoding="utf-8"))
    default_budget = data.get("defaults", {}).get("budget_seconds", 1800)
    modules = []
    for entry in data["module"]:
        modules.append({"path": entry["path"], "tests": list(entry["tests"]),
                        "budget": int(entry.get("budget_seconds", default_budget))})
    return modules


def short_name(path: str) -> str:
    """src/queuewire/codecs/validation.py -> codecs/validation.py"""
    return path.removeprefix("src/queuewire/")


def slug_of(path: str) -> str:
    """src/queuewire/codecs/validation.py -> codecs.validation (the report's file name)"""
    return short_name(path).replace("/", ".").removesuffix(".py")


def load_exclusions(path: Path = EQUIVALENT) -> list[Exclusion]:
    """Every ``*.txt`` of the directory ``path`` (or the one file ``path``). Blocks separated
    by blank lines: ``<module> :: <function>``, then ``- <line>`` and
    ``+ <line>`` (the diff's removed and added lines, compared stripped), then ``why: <reason>``.
    ``#`` starts a comment line."""
    if path.is_dir():
        return [e for file in sorted(path.glob("*.txt")) for e in load_exclusions(file)]
    if not path.is_file():
        return []
    out: list[Exclusion] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if not block:
            return
        start, head = block[0]
        where = f"{path.name}:{start}"
        if " :: " not in head:
            raise SystemExit(f"{where}: expected '<module> :: <function>', got {head!r}")
        module, function = (x.strip() for x in head.split(" :: ", 1))
        removed, added, reason = [], [], None
        for no, line in block[1:]:
            if line.startswith("- "):
                removed.append(line[2:].strip())
            elif line.startswith("+ "):
                added.append(line[2:].strip())
            elif line.startswith("why:"):
                reason = line[4:].strip()
            else:
                raise SystemExit(f"{path.name}:{no}: expected '- ', '+ ' or 'why:', got {line!r}")
        if not reason:
            raise SystemExit(f"{where}: an equivalent mutant needs a 'why:' line")
        if not removed and not added:
            raise SystemExit(f"{where}: quote the mutant's removed and added lines")
        out.append(Exclusion(short_name(module), function, removed, added, reason, where))
        block.clear()

    for no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.rstrip()
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            flush()
        else:
            block.append((no, line))
    flush()
    return out


# ---------------------------------------------------------------------------------------------
# the temporary copy


def copy_tree(dest: Path, ref: str | None) -> str:
    """The repository's files into ``dest``: the commit ``ref`` (git archive), or the working
    tree (tracked and untracked files that .gitignore does not exclude). Returns a label."""
    if ref:
        commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.strip()
        archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive {ref} failed")
        return f"commit {commit}"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        rel = name.decode()
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.strip()
    return f"working tree at {head}" + (" (with uncommitted changes)" if dirty else "")


def configure(copy: Path, module: dict, tests: list[str]) -> None:
    """mutmut's settings, in the copy's pyproject.toml (mutmut reads [tool.mutmut] there)."""
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    if "[tool.mutmut]" in text:
        raise SystemExit("pyproject.toml already has [tool.mutmut]: the driver writes its own")
    plugin_dir = copy / ".qw-mutation"
    plugin_dir.mkdir()
    shutil.copy2(HERE / "qw_mutation_plugin.py", plugin_dir / "qw_mutation_plugin.py")
    (plugin_dir / "qw_mutation_preload_spec.py").write_text(PRELOAD_SPEC, encoding="utf-8")
    (plugin_dir / "preload.txt").write_text("\n".join(PRELOAD) + "\n", encoding="utf-8")
    # spec/ and vectors/ are read by the tests relative to the test files (mutants/tests/...)
    also = [p for p in ("spec", "vectors") if (copy / p).exists()]
    settings = {
        "source_paths": ["src"],
        "only_mutate": [module["path"]],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "qw_mutation_plugin"],
        "also_copy": also,
        "use_git_change_detection": False,
        # a fresh import of the test files per mutant (see PRELOAD above): mutmut's default
        # forks every worker from the process that ran the stats, where the test files are
        # already imported and what they built at import was built without a mutant
        "process_isolation": "forkserver",
        "forkserver_warmup": "import",
        "preload_modules_file": str(plugin_dir / "preload.txt"),
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    pyproject.write_text(text + "\n".join(lines) + "\n", encoding="utf-8")


def run_mutmut(copy: Path, budget: int, children: int, log: Path,
               names: list[str] | None = None) -> tuple[float, bool]:
    """``mutmut run`` in the copy, niced, for at most ``budget`` seconds; on timeout it is
    interrupted (SIGINT: it stops its workers and keeps the results so far). Returns the wall
    time and whether the budget ended the run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy / ".qw-mutation"),
                                                      env.get("PYTHONPATH")]))
    env.pop("QUEUEWIRE_SPEC_DIR", None)
    mutmut = Path(sys.executable).with_name("mutmut")
    cmd = ["nice", "-n", "10", str(mutmut), "run", "--max-children", str(children), *(names or [])]
    start = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=budget)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = time.monotonic() - start
    if not timed_out and proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise SystemExit(f"mutmut run failed (exit {proc.returncode}); the end of {log}:\n{tail}")
    return wall, timed_out


# ---------------------------------------------------------------------------------------------
# reading mutmut's results, through its public surface: the `mutmut results` command for the
# statuses, and the mutants/ copy of the module it writes (every mutant a function beside the
# original, named ``x_<function>__mutmut_<n>`` or ``xǁ<Class>ǁ<method>__mutmut_<n>``) for the diffs

RESULT_LINE = re.compile(r"^\s*(?P<name>\S+__mutmut_\d+): (?P<status>.+?)\s*$")
MUTANT_DEF = re.compile(r"^(?:x_(?P<func>\w+?)|xǁ(?P<cls>[^ǁ]+)ǁ(?P<meth>\w+?))__mutmut_(?P<n>\d+|orig)$")
DEF_LINE = re.compile(r"^\s*(async\s+)?def\s")
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def mutated_function(match: re.Match[str]) -> tuple[str, str]:
    """The function a MUTANT_DEF name belongs to: its own name, and ``Class.method`` or
    ``function`` (the report's name for it)."""
    original = match["func"] or match["meth"]
    return original, f"{match['cls']}.{original}" if match["cls"] else original


def mutmut_statuses(copy: Path) -> dict[str, str]:
    """Every mutant's name -> its status, as ``mutmut results --all true`` prints them."""
    mutmut = Path(sys.executable).with_name("mutmut")
    done = subprocess.run([str(mutmut), "results", "--all", "true"], cwd=copy, check=True,
                          capture_output=True, text=True)
    out = {}
    for line in done.stdout.splitlines():
        match = RESULT_LINE.match(line)
        if match:
            out[match["name"]] = match["status"]
    return out


def mutant_functions(mutated: str) -> dict[tuple[str, str], str]:
    """(``Class.method`` or ``function``, mutant number or "orig") -> the function's text in
    mutmut's mutants/ copy of a module, dedented, renamed to the original name."""
    lines = mutated.splitlines()
    out: dict[tuple[str, str], str] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body)
                continue
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            match = MUTANT_DEF.match(node.name)
            if not match:
                continue
            original, function = mutated_function(match)
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            text = textwrap.dedent("\n".join(lines[start - 1:node.end_lineno]))
            text = re.sub(rf"\bdef {re.escape(node.name)}\(", f"def {original}(", text, count=1)
            out[function, match["n"]] = text
    visit(ast.parse(mutated).body)
    return out


def mutant_diff(path: str, orig: str, mutant: str) -> str:
    return "\n".join(difflib.unified_diff(orig.split("\n"), mutant.split("\n"), fromfile=path,
                                          tofile=path, lineterm=""))


def def_lines(source: str) -> dict[str, int]:
    """``Class.method`` / ``function`` -> the line of its ``def`` (top level and one class deep,
    what mutmut mutates)."""
    found: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.setdefault(node.name, node.lineno)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.setdefault(f"{node.name}.{item.name}", item.lineno)
    return found


def parse_diff(diff: str, orig: str, def_line: int | None) -> tuple[int | None, list[str], list[str]]:
    """The file line of the first changed line, and the removed and added lines (stripped)."""
    removed, added, first = [], [], None
    orig_lines = orig.splitlines()
    def_index = next((i for i, s in enumerate(orig_lines) if DEF_LINE.match(s)), 0)
    at = None
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        hunk = HUNK.match(line)
        if hunk:
            at = int(hunk.group(1)) - 1  # 0-based index in the function's text
            continue
        if at is None:
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
            if first is None:
                first = at
            at += 1
        elif line.startswith("+"):
            added.append(line[1:].strip())
            if first is None:
                first = max(at - 1, 0)
        else:
            at += 1
    if first is None or def_line is None:
        return None, removed, added
    return def_line + (first - def_index), removed, added


def collect(copy: Path, module_path: str) -> list[Mutant]:
    """Every mutant of the module in the copy: its status, function, line and diff."""
    dotted = ".".join(Path(module_path).with_suffix("").parts[1:])  # below src/
    functions = mutant_functions((copy / "mutants" / module_path).read_text(encoding="utf-8"))
    defs = def_lines((copy / module_path).read_text(encoding="utf-8"))
    mutants = []
    for name, status in mutmut_statuses(copy).items():
        module, _, short = name.rpartition(".")
        match = MUTANT_DEF.match(short)
        if module != dotted or not match:
            continue
        function = mutated_function(match)[1]
        orig, mutated = functions[function, "orig"], functions[function, match["n"]]
        diff = mutant_diff(module_path, orig, mutated)
        line, removed, added = parse_diff(diff, orig, defs.get(function))
        mutants.append(Mutant(name, function, status, line, diff, removed, added))
    return mutants


def apply_exclusions(module: str, mutants: list[Mutant], exclusions: list[Exclusion]) -> None:
    for ex in exclusions:
        if ex.module != module:
            continue
        for m in mutants:
            if (m.function == ex.function and m.removed == ex.removed and m.added == ex.added
                    and m.status in SURVIVED):
                m.status = "equivalent"
                m.reason = ex.reason
                ex.used = True


# ---------------------------------------------------------------------------------------------
# the report


def summarize(module: dict, mutants: list[Mutant], wall: float, timed_out: bool, source: str,
              exclusions: list[Exclusion]) -> dict:
    def count(statuses: set[str]) -> int:
        return sum(m.status in statuses for m in mutants)

    killed, timeouts, survived = count(KILLED), count(TIMEOUT), count(SURVIVED)
    judged = killed + timeouts + survived
    known = KILLED | TIMEOUT | SURVIVED | NO_TESTS | NOT_RUN | {"equivalent"}
    name = short_name(module["path"])
    return {
        "module": module["path"],
        "module_source": module.get("source_text"),
        "tests": module["tests"],
        "date": dt.date.today().isoformat(),
        "source": source,
        "mutants": len(mutants),
        "killed": killed,
        "timeouts": timeouts,
        "survived": survived,
        "equivalent": count({"equivalent"}),
        "no_tests": count(NO_TESTS),
        "not_run": count(NOT_RUN),
        "other": sum(m.status not in known for m in mutants),
        "score": round(100.0 * (killed + timeouts) / judged, 1) if judged else None,
        "wall_seconds": round(wall),
        "budget_seconds": module["budget"],
        "budget_ended": timed_out,
        "stale_exclusions": [f"{e.where}: {e.function}" for e in exclusions
                             if e.module == name and not e.used],
        "mutant_list": [m.__dict__ for m in mutants],
    }


def render(summary: dict) -> str:
    s = summary
    score = "n/a" if s["score"] is None else f"{s['score']:.1f} %"
    out = [f"# mutation: {s['module']}  ({s['date']}, {s['source']})",
           f"tests: {' '.join(s['tests'])}",
           f"mutants {s['mutants']}: killed {s['killed']}, timeouts {s['timeouts']}, survived "
           f"{s['survived']}, equivalent {s['equivalent']}, no tests {s['no_tests']}, not run "
           f"{s['not_run']}" + (f", other {s['other']}" if s["other"] else ""),
           f"score {score} = (killed + timeouts) / (killed + timeouts + survived); wall "
           f"{s['wall_seconds']} s of a {s['budget_seconds']} s budget"
           + ("  -- THE BUDGET ENDED THE RUN: the score covers only the mutants run" if s["budget_ended"]
              else "")]
    for e in s["stale_exclusions"]:
        out.append(f"STALE equivalent/ entry (matches no surviving mutant): {e}")
    groups = [("SURVIVED", SURVIVED), ("NO TESTS (no test of this module runs the function)", NO_TESTS),
              ("NOT RUN", NOT_RUN), ("OTHER (suspicious)", None), ("EQUIVALENT (excluded)", {"equivalent"})]
    known = KILLED | TIMEOUT | SURVIVED | NO_TESTS | NOT_RUN | {"equivalent"}
    for title, statuses in groups:
        rows = [m for m in s["mutant_list"]
                if (m["status"] in statuses if statuses is not None else m["status"] not in known)]
        if not rows:
            continue
        out.append("")
        out.append(f"## {title}: {len(rows)}")
        for m in sorted(rows, key=lambda m: (m["line"] or 0, m["name"])):
            mut = Mutant(**m)
            where = f"{s['module']}:{m['line'] if m['line'] else '?'}"
            out.append(f"{where}  {m['function']}  [{m['name'].rpartition('.')[2]}]  {mut.one_line()}")
            if m["reason"]:
                out.append(f"    why equivalent: {m['reason']}")
            elif statuses is SURVIVED:
                out.extend("    " + line for line in m["diff"].splitlines()[2:])
    return "\n".join(out) + "\n"


def table_row(s: dict) -> str:
    score = "n/a" if s["score"] is None else f"{s['score']:.1f} %"
    return (f"| `{short_name(s['module'])}` | {s['mutants']} | {s['killed']} | {s['survived']} | "
            f"{s['timeouts']} | {s['equivalent']} | {s['no_tests']} | {s['not_run']} | {score} | "
            f"{s['wall_seconds']} s | {s['date']}, {s['source']} |")


def function_texts(source: str) -> dict[str, str]:
    """``Class.method`` / ``function`` -> its source text (what mutmut mutates: top level and
    one class deep)."""
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        items = node.body if isinstance(node, ast.ClassDef) else [node]
        prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        for item in items:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                out.setdefault(prefix + item.name, ast.get_source_segment(source, item) or "")
    return out


def mutant_pattern(module_path: str, function: str) -> str:
    """mutmut's name for every mutant of one function (an fnmatch pattern)."""
    dotted = module_path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    cls, _, func = function.rpartition(".")
    return f"{dotted}.xǁ{cls}ǁ{func}__mutmut_*" if cls else f"{dotted}.x_{func}__mutmut_*"


def open_names(slug: str, source: str) -> tuple[dict, list[str], set[str]]:
    """The last report of a module, the names (or patterns) of the mutants to rerun: those it
    left open (survived, not run, no tests, equivalent) in functions whose text is unchanged, and every
    mutant of a function that changed or is new since; and the set of those functions."""
    path = REPORTS / f"{slug}.json"
    if not path.is_file():
        raise SystemExit(f"--open: no report {path.relative_to(ROOT)} yet; run the module in full first")
    old = json.loads(path.read_text(encoding="utf-8"))
    if "module_source" not in old:
        raise SystemExit(f"--open: {path.name} does not hold the source it mutated; run the module in full")
    before, now = function_texts(old["module_source"]), function_texts(source)
    changed = {f for f, text in now.items() if before.get(f) != text}
    names = [m["name"] for m in old["mutant_list"]
             if m["status"] in SURVIVED | NOT_RUN | NO_TESTS | {"equivalent"}
             and m["function"] not in changed]
    names += [mutant_pattern(old["module"], f) for f in sorted(changed)]
    return old, names, changed


def merge_open(old: dict, names: list[str], changed: set[str], mutants: list[Mutant]) -> list[Mutant]:
    """The rerun mutants' new statuses over the last report's statuses of the others (the
    mutants of a changed function are all rerun)."""
    rerun = set(names)
    before = {m["name"]: m["status"] for m in old["mutant_list"]}
    for m in mutants:
        if m.name not in rerun and m.function not in changed:
            m.status = before.get(m.name, m.status)
    return mutants


def run_module(module: dict, args: argparse.Namespace, exclusions: list[Exclusion]) -> dict:
    name, slug = short_name(module["path"]), slug_of(module["path"])
    REPORTS.mkdir(parents=True, exist_ok=True)
    log = REPORTS / f"{slug}.log"
    budget = args.budget or module["budget"]
    copy = Path(tempfile.mkdtemp(prefix="qw-mutation-"))
    old, names = None, None
    try:
        source = copy_tree(copy, args.ref)
        text = (copy / module["path"]).read_text(encoding="utf-8")
        changed: set[str] = set()
        if args.open:
            old, names, changed = open_names(slug, text)
            if args.only:
                names = [n for n in names if any(fnmatch.fnmatch(n, pat) for pat in args.only)]
            if not names:
                print(f"== {name}: nothing open to rerun", flush=True)
                return old
            source = (f"[{old['source']}] with {len(names)} open mutants"
                      + (f" and the mutants of {len(changed)} changed functions" if changed else "")
                      + f" rerun on the {source}")
        configure(copy, module, module["tests"])
        what = f"{len(names)} open mutants or patterns" if names else "every mutant"
        print(f"== {name}: mutmut ({what}) in {copy} ({source}), budget {budget} s, log {log}",
              flush=True)
        wall, timed_out = run_mutmut(copy, budget, args.max_children, log, names)
        mutants = collect(copy, module["path"])
    finally:
        if args.keep:
            print(f"   kept {copy}")
        else:
            shutil.rmtree(copy, ignore_errors=True)
    if old is not None and names:
        mutants = merge_open(old, names, changed, mutants)
    module = {**module, "source_text": text}
    apply_exclusions(name, mutants, exclusions)
    summary = summarize({**module, "budget": budget}, mutants, wall, timed_out, source, exclusions)
    text = render(summary)
    (REPORTS / f"{slug}.txt").write_text(text, encoding="utf-8")
    (REPORTS / f"{slug}.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(text if args.verbose else "\n".join(text.splitlines()[:5] + [
        f"   survivors with their diffs: {REPORTS.relative_to(ROOT) / (slug + '.txt')}"]), flush=True)
    return summary


def rescore(module: dict, exclusions: list[Exclusion]) -> dict:
    """Apply equivalent/ again to a module's last report, without running mutmut."""
    name, slug = short_name(module["path"]), slug_of(module["path"])
    old = json.loads((REPORTS / f"{slug}.json").read_text(encoding="utf-8"))
    mutants = []
    for row in old["mutant_list"]:
        m = Mutant(**row)
        if m.status == "equivalent":
            m.status, m.reason = "survived", None
        mutants.append(m)
    apply_exclusions(name, mutants, exclusions)
    summary = summarize({**module, "budget": old["budget_seconds"], "source_text": old.get("module_source")},
                        mutants, old["wall_seconds"],
                        old["budget_ended"], old["source"], exclusions)
    summary["date"] = old["date"]
    (REPORTS / f"{slug}.txt").write_text(render(summary), encoding="utf-8")
    (REPORTS / f"{slug}.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*",
                        help="modules to run (path below src/queuewire, e.g. codecs/validation.py); "
                             "default: all of modules.toml")
    parser.add_argument("--ref", help="mutate this commit (git archive) instead of the working tree")
    parser.add_argument("--max-children", type=int, default=2, help="mutmut workers (default 2)")
    parser.add_argument("--budget", type=int, help="seconds per module (default: modules.toml)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every survivor's diff")
    parser.add_argument("--rescore", action="store_true",
                        help="apply equivalent/ to the last reports again, without running mutmut")
    parser.add_argument("--open", action="store_true",
                        help="rerun only the mutants the last report left open (survived, not run, "
                             "no tests) and merge them into it (with every mutant of a function "
                             "changed since)")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="with --open: only the open mutants whose name matches this fnmatch "
                             "pattern, e.g. '*_optional_type*' (repeatable)")
    args = parser.parse_args(argv)

    modules = load_modules()
    exclusions = load_exclusions()
    if args.modules:
        wanted = {short_name(m) for m in args.modules}
        unknown = wanted - {short_name(m["path"]) for m in modules}
        if unknown:
            raise SystemExit(f"not in {MODULES.name}: {', '.join(sorted(unknown))}")
        modules = [m for m in modules if short_name(m["path"]) in wanted]
    if args.rescore and args.open:
        parser.error("--rescore and --open exclude each other")
    if args.rescore:
        modules = [m for m in modules if (REPORTS / f"{slug_of(m['path'])}.json").is_file()]
        summaries = [rescore(m, exclusions) for m in modules]
    else:
        summaries = [run_module(m, args, exclusions) for m in modules]
    print("\n| module | mutants | killed | survived | timeouts | equivalent | no tests | not run "
          "| score | wall | date, code |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        print(table_row(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
