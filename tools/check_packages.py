#!/usr/bin/python3
"""Every file CMake found must come from a package that tools/setup.sh installs.

    /usr/bin/python3 tools/check_packages.py [build/CMakeCache.txt]

A developer machine that already has a package hides a missing install step (issue 10: Debian's
libdnnl-dev CMake config needs OpenCL, whose -dev package is only a Recommends, and setup.sh installs
with --no-install-recommends). This check reads every FILEPATH/PATH entry of the CMake cache (the
libraries, headers, config directories and tools that find_package and find_library resolved), asks
dpkg which package owns each, and requires that package to be in the closure of setup.sh's
PACKAGES over Depends/Pre-Depends (what `apt-get install --no-install-recommends` brings), or to be
part of the base system (Essential or Priority required). Exits non-zero and names each file, its
package and the fix otherwise.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_packages():
    """PACKAGES and TEST_PACKAGES of tools/setup.sh (the binary's, and the tests' and benchmarks': a test
    build has both), and FUZZ_PACKAGES (installed with --fuzz for tools/sanitize.sh)."""
    text = open(os.path.join(ROOT, "tools", "setup.sh")).read()
    m = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M)
    if not m:
        sys.exit("check_packages: tools/setup.sh has no PACKAGES=(...) list")
    tests = re.search(r"^TEST_PACKAGES=\((.*?)\)", text, re.S | re.M)
    fuzz = re.search(r"^FUZZ_PACKAGES=\((.*?)\)", text, re.S | re.M)
    return m.group(1).split() + (tests.group(1).split() if tests else []), (fuzz.group(1).split() if fuzz else [])


def installed():
    """name -> (depends field, essential, priority, provides) of every installed package."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Pre-Depends}, ${Depends}\t${Essential}\t"
         "${Priority}\t${Provides}\n"], capture_output=True, text=True, check=True).stdout
    pkgs, provided = {}, {}
    for line in out.splitlines():
        name, status, deps, essential, priority, provides = (line.split("\t") + [""] * 6)[:6]
        if not status.endswith("installed") or "not-installed" in status:
            continue
        pkgs[name] = (deps, essential == "yes", priority)
        for p in provides.split(","):
            p = p.strip().split(" ")[0]
            if p:
                provided.setdefault(p, []).append(name)
    return pkgs, provided


def closure(roots, pkgs, provided):
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        for cand in [name] + provided.get(name, []):
            if cand in pkgs and cand not in seen:
                seen.add(cand)
                for group in pkgs[cand][0].split(","):
                    # "a (>= 1) | b": any installed alternative satisfies the dependency
                    for alt in group.split("|"):
                        alt = alt.strip().split(" ")[0].split(":")[0]
                        if alt:
                            todo.append(alt)
    return seen


# Binary tools CMake's compiler detection takes when present, with fallbacks otherwise (clang picks
# llvm-ar, ld.lld, ... from a machine that has LLVM, and binutils from build-essential on one that
# does not): not needs.
OPTIONAL_TOOL = re.compile(r"^CMAKE_(AR|RANLIB|NM|OBJCOPY|OBJDUMP|READELF|STRIP|ADDR2LINE|DLLTOOL|LINKER|MT|TAPI"
                           r"|[A-Z]+_COMPILER_(AR|RANLIB))$")


def owners(path):
    r = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    names = set()
    for line in r.stdout.splitlines():
        if line.startswith("diversion by"):
            continue
        for n in line.split(":")[0].split(","):
            names.add(n.strip())
    return names


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "CMakeCache.txt")
    if not os.path.exists(cache):
        sys.exit(f"check_packages: {cache} not found: configure the build first (bash tools/setup.sh)")
    listed, fuzz = setup_packages()
    pkgs, provided = installed()
    missing_listed = [p for p in listed if p not in pkgs and p not in provided]
    # a fuzz build (tools/sanitize.sh) may use FUZZ_PACKAGES too (setup.sh --fuzz installs them)
    if "SHARDLM_FUZZ:BOOL=ON" in open(cache).read():
        missing_listed += [p for p in fuzz if p not in pkgs and p not in provided]
        listed = listed + fuzz
    need = closure(listed, pkgs, provided)
    base = {n for n, (_, ess, prio) in pkgs.items() if ess or prio == "required"}
    ok = need | closure(base, pkgs, provided)
    bad, checked = [], 0
    for line in open(cache):
        m = re.match(r"^([A-Za-z0-9_]+):(FILEPATH|PATH)=(/.+)$", line.strip())
        if not m or m.group(1).startswith("CMAKE_INSTALL") or OPTIONAL_TOOL.match(m.group(1)):
            continue
        path = m.group(3)
        if not os.path.exists(path):
            continue
        who = owners(path) or owners(os.path.realpath(path))
        if who is None:
            continue  # not a packaged file (built here, or in /usr/local)
        checked += 1
        if not who & ok:
            bad.append((m.group(1), path, sorted(who)))
    for name, path, who in bad:
        print(f"check_packages: {path} (CMake cache {name}) comes from {', '.join(who)}, which "
              f"tools/setup.sh does not install (not in PACKAGES nor pulled in by their Depends).\n"
              f"---> HINT: add {who[0]} to PACKAGES in tools/setup.sh", file=sys.stderr)
    for p in missing_listed:
        print(f"check_packages: {p} is in tools/setup.sh's PACKAGES but not installed", file=sys.stderr)
    if bad or missing_listed:
        return 1
    print(f"check_packages: {checked} files CMake found all come from setup.sh's packages "
          f"({len(listed)} listed, {len(need)} with their dependencies)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
