#!/usr/bin/env python3
"""bench/soak_elastic.py: `shardlm launch` under fire. Two soaks, both on configs/sotu.json (global batch 12
of 128 tokens, 1 thread per rank):

--mode memory (the default): launch -np NP --max-np NP keeps a checkpoint in memory after every step (its
default --mem-ckpt-every 1; train/memory_checkpoint.h) and writes one to disk every CKPT seconds. Every rank
is a host of its own (SHARDLM_MEM_CKPT_HOSTS=per-rank), so that deleting a rank's store is a lost node's
memory. Every GAP_MIN..GAP_MAX seconds one of:
  kill   SIGKILL a random rank (a crashed process: its node's memory stays)
  node   SIGSTOP a random rank, delete its node's memory, SIGKILL it (a lost node: its part of the checkpoint
         comes from its replica over MPI)
  stall  SIGSTOP a random rank (a hung one: --comm-timeout ends the attempt, the flight records name it)
  disk   fill the run directory's file system (a tmpfs of --disk-mb, mounted by the script: needs root) to
         within 1 MB: the next disk checkpoint fails and launch stops (not a lost rank); the script frees the
         space and starts launch again with --resume, as an operator would
Each launcher restart is on NP ranks again (no --hostfile: a lost rank's CPU is free at once); with --hostfile
(one node of NP slots) a restart drops the lost rank's slot and launch grows back to NP at the next checkpoint
(then the layouts differ, and the uninterrupted run is not compared bit for bit). After SECONDS
the launcher gets SIGTERM. Checked: metrics.jsonl holds every step once; per failure the steps lost (the
steps logged minus the step resumed) and the recovery time (the failure -> the first step of the next
attempt); and an uninterrupted run of the same steps on NP ranks equals the soak at every step, loss and
gradient norm to the bit.

--mode shrink: launch -np NP --min-np MIN_NP without memory checkpoints; each kill leaves a rank fewer
(NP -> ... -> MIN_NP, the global batch unchanged); a kill below MIN_NP makes it give up and the script starts
it again on NP ranks. Every segment (one attempt: from the checkpoint it resumed to the next resume point) is
run again from a copy of that checkpoint, on that attempt's layout, and must equal the soak to the bit.

  python3 bench/soak_elastic.py [--mode memory|shrink] [--seconds 1800] [--np 4] [--min-np 2] [--gap 30 90]
                                [--ckpt 10] [--timeout 10] [--disk-mb 400] [--events kill,node,stall,disk] [--hostfile]
Needs data/sotu/sotu_train.bin (tools/quickstart.sh, or shardlm tokenize).
"""
import argparse, glob, json, os, random, re, shutil, signal, statistics, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                out[j["step"]] = j
    except FileNotFoundError:
        pass
    return out


def events(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def run_until(cmd, t_end, log, env=None):
    """Runs cmd until it ends or t_end (then SIGTERM: a checkpoint, exit); its exit code, or None when stopped."""
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    while p.poll() is None and time.time() < t_end:
        time.sleep(0.2)
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        p.wait()
        return None
    return p.returncode


def wait_first_step(metrics, c, limit, poll):
    """Waits until the next attempt logs step c (after it dropped the killed attempt's row of c, if any)."""
    if c in rows(metrics):
        while c in rows(metrics) and time.time() < limit:
            time.sleep(poll)
    while c not in rows(metrics) and time.time() < limit:
        time.sleep(poll)


def layout_flags(layout):  # "dp2 tp1 pp1" -> ["--dp", "2", ...]
    out = []
    for part in layout.split():
        out += ["--" + part[:2], part[2:]]
    return out


def soak_shrink(a):
    out, refs = a.out, a.out + ".refs"
    for d in (out, refs):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(refs)
    exe = a.out + ".bin"  # a copy: rebuilding during the soak does not change it
    shutil.copy(a.bin, exe)
    os.environ.pop("OPENBLAS_CORETYPE", None)
    steps = 100000  # ended by time (SIGTERM); the schedule (the config's) is the same in the references
    train = ["--config", "configs/sotu.json", "--threads", "1", "--global-batch", "12", "--micro-batch", "1",
             "--steps", str(steps), "--ckpt-every", "0", "--ckpt-every-seconds", str(a.ckpt), "--async-ckpt", "--keep-ckpts", "3",
             "--val-every", "0", "--sample-tokens", "0", "--log-every", "50"]
    log = open(out + ".log", "w")
    t_end = time.time() + a.seconds
    kills = []  # (time, pid)
    lock = threading.Lock()

    def killer():
        while time.time() < t_end:
            time.sleep(random.uniform(*a.gap))
            if time.time() >= t_end:
                return
            ps = []  # the ranks: argv = [exe, "train", ...] (not mpirun, not the launcher)
            for pid in (d for d in os.listdir("/proc") if d.isdigit()):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                if len(argv) > 1 and argv[0].decode() == exe and argv[1] == b"train":
                    ps.append(pid)
            if not ps:
                continue
            pid = int(random.choice(ps))
            try:
                os.kill(pid, signal.SIGKILL)
                with lock:
                    kills.append((time.time(), pid))
                print(f"soak: {time.strftime('%H:%M:%S')} SIGKILL rank pid {pid}", flush=True)
            except ProcessLookupError:
                pass

    # recovery: from a kill to the first step of the next attempt (its resumed step's metrics row, after
    # the attempt trimmed the killed one's later rows)
    recovered = []  # (time the attempt was started, time its first step was recorded)
    metrics = os.path.join(out, "metrics.jsonl")

    def track(t_start, c):
        wait_first_step(metrics, c, t_end + 120, 0.05)
        with lock:
            recovered.append((t_start, time.time()))

    def watcher():
        handled = 0
        while time.time() < t_end:
            ev = events(os.path.join(out, "launch.jsonl"))
            for e in ev[handled:]:
                if e["event"] == "restart":  # keep the checkpoint it resumes from for the reference
                    c = e["resume_step"]
                    src, dst = os.path.join(out, "ckpt_%08d" % c), os.path.join(refs, "ckpt_%08d" % c)
                    if c > 0 and os.path.isdir(src) and not os.path.exists(dst):
                        shutil.copytree(src, dst)
                    threading.Thread(target=track, args=(e["time"], c), daemon=True).start()
            handled = len(ev)
            time.sleep(0.05)

    threading.Thread(target=killer, daemon=True).start()
    threading.Thread(target=watcher, daemon=True).start()
    relaunch_from = []  # the checkpoint each operator relaunch resumed
    while time.time() < t_end:
        ckpts = sorted(int(n[5:]) for n in os.listdir(out) if n.startswith("ckpt_")) if os.path.isdir(out) else []
        resume = ["--resume"] if ckpts else []
        if ckpts:  # an operator's relaunch on NP ranks: keep its checkpoint for the reference too
            c = ckpts[-1]
            relaunch_from.append(c)
            dst = os.path.join(refs, "ckpt_%08d" % c)
            if not os.path.exists(dst):
                shutil.copytree(os.path.join(out, "ckpt_%08d" % c), dst)
            threading.Thread(target=track, args=(time.time(), c), daemon=True).start()
        cmd = [exe, "launch", "-np", str(a.np), "--min-np", str(a.min_np), "--max-restarts", "1000", "--oversubscribe",
               "--", "train"] + train + ["--mem-ckpt-every", "0", "--out", out] + resume
        code = run_until(cmd, t_end, log)
        if code is None:
            break
        print(f"soak: launcher exited {code}: starting it again on {a.np} ranks", flush=True)
    time.sleep(1)
    log.close()

    ev = events(os.path.join(out, "launch.jsonl"))
    final = rows(os.path.join(out, "metrics.jsonl"))
    last_step = max(final) + 1 if final else 0
    # segments: each attempt ("start"), from the step it resumed (the restart event before it, or the
    # operator relaunch's checkpoint, or 0) to the next attempt's resume step (or the end)
    seg, pending, relaunches = [], 0, iter(relaunch_from)
    for i, e in enumerate(ev):
        if e["event"] == "restart":
            pending = e["resume_step"]
        elif e["event"] == "start":
            c = pending if pending is not None else next(relaunches, 0)
            seg.append([e["layout"], c])
            pending = None
    for i in range(len(seg)):
        seg[i].append(seg[i + 1][1] if i + 1 < len(seg) else last_step)
    starts = seg
    print(f"\nsoak: {len(kills)} kills in {a.seconds:.0f} s, {len(starts)} attempts, {last_step} steps")
    # the references
    ok, compared = True, 0
    startup = []
    for i, (layout, c, e) in enumerate(seg):
        if e <= c:
            continue
        d = os.path.join(refs, f"seg{i}")
        os.makedirs(d, exist_ok=True)
        if c > 0:
            shutil.copytree(os.path.join(refs, "ckpt_%08d" % c), os.path.join(d, "ckpt_%08d" % c))
        ranks = 1
        for part in layout.split():
            ranks *= int(part[2:])
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        cmd += [exe, "train"] + train + layout_flags(layout) + ["--out", d] + (["--resume"] if c > 0 else [])
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_first = None
        while p.poll() is None:
            r = rows(os.path.join(d, "metrics.jsonl"))
            if t_first is None and c in r:
                t_first = time.time() - t0
            if r and max(r) >= e - 1:
                p.send_signal(signal.SIGTERM)
                p.wait()
                break
            time.sleep(0.1)
        if t_first is not None and c > 0:
            startup.append(t_first)
        r = rows(os.path.join(d, "metrics.jsonl"))
        bad = [s for s in range(c, e) if s not in r or r[s]["loss"] != final[s]["loss"] or r[s]["grad_norm"] != final[s]["grad_norm"]]
        compared += e - c
        print(f"segment {i}: {layout:12s} steps {c:5d}..{e - 1:5d}: " + ("equal to the clean reference" if not bad else f"DIFFERS at steps {bad[:5]}"))
        ok &= not bad
    # per failure: steps lost and recovery
    fails = [x for x in ev if x["event"] == "restart"]
    lost = [x["steps_lost"] for x in fails]
    rec = []
    for t_kill, _ in kills:
        after = sorted(x for x in recovered if x[0] > t_kill)
        if after:
            rec.append(after[0][1] - t_kill)
    print(f"\nrestarts by the launcher: {len(fails)}; operator relaunches: {len(relaunch_from)}")
    if lost:
        print(f"steps lost per failure: mean {statistics.mean(lost):.1f}, max {max(lost)} (checkpoint every {a.ckpt:.0f} s)")
    if rec:
        print(f"recovery (kill -> first step of the next attempt): median {statistics.median(rec):.1f} s, max {max(rec):.1f} s")
    if startup:
        print(f"start-up + checkpoint load + one step of a clean resume: median {statistics.median(startup):.1f} s")
    print(f"segments {'all equal' if ok else 'NOT all equal'} to their clean references ({compared} steps compared)")
    return 0 if ok else 1



def rank_processes(exe):
    """{world rank: pid} of the training processes (argv = [exe, "train", ...]: not mpirun, not the launcher)."""
    out = {}
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if len(argv) < 2 or argv[0].decode() != exe or argv[1] != b"train":
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, KeyError, ValueError):
            continue
    return out


def metrics_lines(path):
    """The step of every row of metrics.jsonl, in file order."""
    try:
        with open(path) as f:
            return [json.loads(l)["step"] for l in f if l.strip()]
    except FileNotFoundError:
        return []


def resumed_step(log):
    """The step an attempt resumed at, from its log (0: from the start)."""
    try:
        text = open(log, errors="replace").read()
    except FileNotFoundError:
        return None
    m = re.search(r"resuming from memory: step (\d+)", text) or re.search(r"resuming from \S*ckpt_(\d+)", text)
    return int(m.group(1)) if m else 0


class MemorySoak:
    """--mode memory: launch with checkpoints kept in memory, under kills, lost nodes, stalls and a full disk."""

    def __init__(self, a):
        self.a, self.out, self.shm = a, a.out, f"/dev/shm/soak_memory_{os.getpid()}"
        self.exe = a.out + ".bin"  # a copy: rebuilding during the soak does not change it
        self.metrics = os.path.join(self.out, "metrics.jsonl")
        self.env = dict(os.environ, SHARDLM_MEM_CKPT_HOSTS="per-rank")
        self.train = ["--config", "configs/sotu.json", "--threads", "1", "--global-batch", "12", "--micro-batch", "1",
                      "--steps", "100000", "--ckpt-every", "0", "--val-every", "0", "--sample-tokens", "0", "--log-every", "50"]
        self.soak_only = ["--ckpt-every-seconds", str(a.ckpt), "--async-ckpt", "--keep-ckpts", "2",
                          "--comm-timeout", str(a.timeout), "--mem-ckpt-dir", self.shm]
        self.kinds = a.events.split(",")
        self.hostfile = None
        self.failures = []   # (time, kind, world rank)
        self.recovered = []  # (time the next attempt started, time its first step was logged)
        self.relaunches = []  # steps logged before each operator relaunch
        self.filler = None
        self.lock = threading.Lock()
        self.t_end = 0

    def setup(self):
        subprocess.run(["umount", self.out], stderr=subprocess.DEVNULL)
        for d in (self.out, self.out + ".ref"):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(self.out)
        shutil.copy(self.a.bin, self.exe)
        self.mounted = "disk" in self.kinds and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.a.disk_mb}m", "tmpfs", self.out]).returncode == 0
        if "disk" in self.kinds and not self.mounted:
            print("soak: cannot mount a tmpfs for the run directory (root needed): no full-disk events", flush=True)
            self.kinds.remove("disk")
        if self.a.hostfile:  # one node of NP slots: a restart drops the lost rank's slot, growth takes it back
            self.hostfile = self.out + ".hosts"
            with open(self.hostfile, "w") as f:
                f.write(f"localhost slots={self.a.np}\n")

    def strike(self):
        ranks = rank_processes(self.exe)
        if not ranks:
            return
        kind, r = random.choice(self.kinds), random.choice(sorted(ranks))
        pid = ranks[r]
        try:
            if kind == "kill":
                os.kill(pid, signal.SIGKILL)
            elif kind == "node":  # its node's memory: <mem-ckpt-dir>/shardlm-<dir>/<run>/<host "rank<r>">
                os.kill(pid, signal.SIGSTOP)
                for d in glob.glob(os.path.join(self.shm, "shardlm-*", "*", f"rank{r}")):
                    shutil.rmtree(d, ignore_errors=True)
                os.kill(pid, signal.SIGKILL)
            elif kind == "stall":
                os.kill(pid, signal.SIGSTOP)
            elif kind == "disk":
                st = os.statvfs(self.out)
                path = os.path.join(self.out, ".filler")
                fd = os.open(path, os.O_CREAT | os.O_WRONLY)
                os.posix_fallocate(fd, 0, max(st.f_bavail * st.f_frsize - (1 << 20), 1))
                os.close(fd)
                self.filler = path
        except ProcessLookupError:
            return
        with self.lock:
            self.failures.append((time.time(), kind, r))
        print(f"soak: {time.strftime('%H:%M:%S')} {kind} world rank {r} (pid {pid})", flush=True)

    def striker(self):
        while time.time() < self.t_end:
            time.sleep(random.uniform(*self.a.gap))
            if time.time() < self.t_end and self.filler is None:
                self.strike()

    def track(self, t_start, c):
        """Recovery: the restart -> the next attempt's first step (logged after it trimmed the killed one's rows)."""
        wait_first_step(self.metrics, c, self.t_end + 120, 0.02)
        with self.lock:
            self.recovered.append((t_start, time.time()))

    def watcher(self):
        handled = 0
        while time.time() < self.t_end:
            ev = events(os.path.join(self.out, "launch.jsonl"))
            for e in ev[handled:]:
                if e["event"] == "restart":
                    threading.Thread(target=self.track, args=(e["time"], e["resume_step"]), daemon=True).start()
            handled = len(ev)
            time.sleep(0.02)

    def run_launches(self):
        """launch until SECONDS are up; after a full disk stopped it, the space freed and launch started again."""
        log = open(self.out + ".log", "w")
        first = True
        while time.time() < self.t_end:
            cmd = [self.exe, "launch", "-np", str(self.a.np), "--max-np", str(self.a.np), "--max-restarts", "1000", "--oversubscribe"]
            cmd += (["--hostfile", self.hostfile] if self.hostfile else []) + ["--", "train"] + self.train + self.soak_only
            cmd += ["--out", self.out] + ([] if first else ["--resume"])
            if not first:
                self.relaunches.append(max(rows(self.metrics), default=-1) + 1)
            code = run_until(cmd, self.t_end, log, self.env)
            if code is None:
                break
            print(f"soak: launcher exited {code}: freeing the disk, starting it again", flush=True)
            if self.filler:
                os.remove(self.filler)
                self.filler = None
            first = False
        time.sleep(1)
        log.close()

    def reference_differs(self, last_step):
        """The steps where an uninterrupted run on NP ranks differs from the soak (loss or gradient norm)."""
        ref = self.out + ".ref"
        cmd = ["mpirun", "--oversubscribe", "-np", str(self.a.np)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        cmd += [self.exe, "train"] + self.train + ["--stop-after", str(last_step), "--out", ref]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        final, clean = rows(self.metrics), rows(os.path.join(ref, "metrics.jsonl"))
        return [s for s in range(last_step) if s not in clean or s not in final or clean[s]["loss"] != final[s]["loss"]
                or clean[s]["grad_norm"] != final[s]["grad_norm"]]

    def analyse(self):
        steps = metrics_lines(self.metrics)
        ev = events(os.path.join(self.out, "launch.jsonl"))
        starts = [e for e in ev if e["event"] == "start"]
        restarts = [e for e in ev if e["event"] == "restart"]
        after = [ev[i + 1] for i, e in enumerate(ev[:-1]) if e["event"] == "restart" and ev[i + 1]["event"] == "start"]
        operator = [e for e in starts if e["attempt"] == 1 and e is not starts[0]]
        logs = [open(e["log"], errors="replace").read() if os.path.exists(e["log"]) else "" for e in starts[1:]]
        rec = {k: [] for k in ("kill", "node", "stall")}
        for t_fail, kind, _ in self.failures:
            later = sorted(x for x in self.recovered if x[0] > t_fail)
            if kind in rec and later:
                rec[kind].append(later[0][1] - t_fail)
        r = {"failures": {k: sum(1 for f in self.failures if f[1] == k) for k in ("kill", "node", "stall", "disk")},
             "attempts": len(starts), "restarts": len(restarts), "relaunches": len(operator),
             "steps": max(steps) + 1 if steps else 0, "memory_resumes": sum("resuming from memory" in t for t in logs),
             "mpi_mb": sum(float(m) for t in logs for m in re.findall(r"([0-9.]+) MB over MPI", t)),
             "lost_per_restart": [e["last_step"] - resumed_step(s["log"]) for e, s in zip(restarts, after)],
             "predicted_wrong": sum(e["resume_step"] != resumed_step(s["log"]) for e, s in zip(restarts, after)),
             "lost_per_relaunch": [n - resumed_step(e["log"]) for n, e in zip(self.relaunches, operator)],
             "recovery_s": rec, "layouts": sorted({e["layout"] for e in starts}),
             "grows": sum(1 for e in ev if e["event"] == "grow"), "ended_on": starts[-1]["np"] if starts else 0}
        r["every_step_once"] = steps == list(range(r["steps"]))
        # bit for bit only while every attempt ran one layout (another one sums in another order)
        r["differs_at"] = self.reference_differs(r["steps"])[:5] if len(r["layouts"]) == 1 else None
        return r

    def report(self, r):
        f, lost = r["failures"], r["lost_per_restart"]
        print(f"\nsoak: {sum(f.values())} failures in {self.a.seconds:.0f} s ({', '.join(f'{v} {k}' for k, v in f.items())}), "
              f"{r['attempts']} attempts ({r['restarts']} launcher restarts, {r['relaunches']} operator relaunches), {r['steps']} steps")
        print(f"resumed from memory: {r['memory_resumes']} of {r['attempts'] - 1}; {r['mpi_mb']:.1f} MB came over MPI "
              "(every host assembles the whole checkpoint; a lost node's part from another host)")
        print(f"metrics.jsonl: {'every step once' if r['every_step_once'] else 'NOT every step once'}")
        if lost:
            print(f"steps lost per launcher restart: {lost.count(0)} x 0, {lost.count(1)} x 1, max {max(lost)}; "
                  f"launch's predicted resume step wrong {r['predicted_wrong']} times")
        if r["lost_per_relaunch"]:
            print(f"steps lost per operator relaunch (full disk): {r['lost_per_relaunch']}")
        for k, v in r["recovery_s"].items():
            if v:
                print(f"recovery ({k} -> first step of the next attempt): median {statistics.median(v):.2f} s, "
                      f"max {max(v):.2f} s (n={len(v)})")
        print(f"layouts: {', '.join(r['layouts'])}; {r['grows']} growths back; ended on {r['ended_on']} ranks")
        if r["differs_at"] is None:
            print("the uninterrupted run: not compared (the layout changed)")
        else:
            print(f"the uninterrupted run on {self.a.np} ranks: " + (
                f"equal at every one of the {r['steps']} steps (loss, gradient norm) to the bit" if not r["differs_at"]
                else f"DIFFERS at steps {r['differs_at']}"))
        with open(self.out + ".json", "w") as fo:
            json.dump(r, fo, indent=1)

    def run(self):
        self.setup()
        self.t_end = time.time() + self.a.seconds
        threading.Thread(target=self.striker, daemon=True).start()
        threading.Thread(target=self.watcher, daemon=True).start()
        self.run_launches()
        r = self.analyse()
        self.report(r)
        if self.mounted:
            subprocess.run(["umount", self.out])
        shutil.rmtree(self.shm, ignore_errors=True)
        lost = r["lost_per_restart"] + r["lost_per_relaunch"]
        ok = r["every_step_once"] and not r["differs_at"] and r["ended_on"] == self.a.np and max(lost, default=0) <= 1
        return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["memory", "shrink"], default="memory")
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--min-np", type=int, default=2)
    ap.add_argument("--gap", type=float, nargs=2, default=[30, 90])
    ap.add_argument("--ckpt", type=float, default=10, help="--ckpt-every-seconds")
    ap.add_argument("--timeout", type=float, default=10, help="--comm-timeout (memory mode: ends a stalled attempt)")
    ap.add_argument("--disk-mb", type=int, default=400, help="memory mode: the run directory's file system")
    ap.add_argument("--events", default="kill,node,stall,disk", help="memory mode: the failures to inject")
    ap.add_argument("--hostfile", action="store_true",
                    help="memory mode: launch --hostfile (one node, NP slots): restarts shrink, growth back at a checkpoint")
    ap.add_argument("--out", default=None)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "shardlm"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.out = a.out or os.path.join(ROOT, "runs", "soak_" + a.mode)
    random.seed(a.seed)
    os.chdir(ROOT)
    if not os.path.exists("data/sotu/sotu_train.bin"):
        sys.exit("soak_elastic: data/sotu/sotu_train.bin missing: run tools/quickstart.sh first")
    return MemorySoak(a).run() if a.mode == "memory" else soak_shrink(a)


if __name__ == "__main__":
    sys.exit(main())
