#!/usr/bin/env python3
"""bench/soak_elastic.py: `shardlm launch` under fire (issue 21, item 5).

Trains configs/sotu.json (global batch 12 of 128 tokens, 1 thread per rank) under
`shardlm launch -np NP --min-np MIN_NP`, checkpointing every CKPT seconds (--async-ckpt), while a killer SIGKILLs a
random rank every GAP_MIN..GAP_MAX seconds. The launcher must go on by itself on the ranks left
(NP -> NP-1 -> ... -> MIN_NP; the global batch unchanged). A kill below MIN_NP makes it give up:
the script then starts it again on NP ranks (an operator replacing the machines: shardlm launch
does not grow a job back by itself). After SECONDS the launcher gets SIGTERM (a checkpoint, exit).

Then every segment (one attempt: from the checkpoint it resumed to the next resume point) is run
again from a copy of that checkpoint, on that attempt's layout, uninterrupted, and its losses must
equal the soak's to the bit. Printed: per failure the steps lost and the recovery time (kill -> the
first step of the next attempt), against the start-up + checkpoint load time of a clean resume.

  python3 bench/soak_elastic.py [--seconds 1800] [--np 4] [--min-np 2] [--gap 30 90] [--ckpt 10]
Needs data/sotu/sotu_train.bin (tools/quickstart.sh, or shardlm tokenize).
"""
import argparse, json, os, random, shutil, signal, statistics, subprocess, sys, threading, time

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


def layout_flags(layout):  # "dp2 tp1 pp1" -> ["--dp", "2", ...]
    out = []
    for part in layout.split():
        out += ["--" + part[:2], part[2:]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--min-np", type=int, default=2)
    ap.add_argument("--gap", type=float, nargs=2, default=[30, 90])
    ap.add_argument("--ckpt", type=float, default=10, help="--ckpt-every-seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "soak_elastic"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "shardlm"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    random.seed(a.seed)
    os.chdir(ROOT)
    if not os.path.exists("data/sotu/sotu_train.bin"):
        sys.exit("soak_elastic: data/sotu/sotu_train.bin missing: run tools/quickstart.sh first")
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
        limit = t_end + 120
        if c in rows(metrics):
            while c in rows(metrics) and time.time() < limit:
                time.sleep(0.05)
        while c not in rows(metrics) and time.time() < limit:
            time.sleep(0.05)
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
               "--", "train"] + train + ["--out", out] + resume
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        while p.poll() is None and time.time() < t_end:
            time.sleep(0.2)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait()
            break
        print(f"soak: launcher exited {p.returncode}: starting it again on {a.np} ranks", flush=True)
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


if __name__ == "__main__":
    sys.exit(main())
