"""gpuclock.py - the GPU's SM clock and board power while a benchmark runs, in one line.

An H100 or H200 at its power cap lowers its clock by hundreds of MHz, so two runs of one build
can differ by several percent (doc/performance.md, twenty-ninth session: the 8K causal forward
read 582 TFLOP/s in one call and 625-637 in four runs of another). A timing is read with the
clock it ran at.

    python3 gpuclock.py run [--label L] [-o CSV] [--interval MS] -- COMMAND [ARGS...]
        runs COMMAND while nvidia-smi samples its first GPU (CUDA_VISIBLE_DEVICES' first entry, else
        0) every MS ms (default 100; the samples
        into CSV when given), then prints one line and exits with COMMAND's status:
        gpuclock L: N busy samples of M over T s: SM clock median C MHz (10%-90%: A-B, max X),
        power mean P W of the L W limit, power cap active in Z% of the busy samples
        ("busy": utilization at least 50%; idle moments, compilation and set-up are left out).
        Without nvidia-smi it runs COMMAND and says that nothing was sampled.
    python3 gpuclock.py summary [--label L] CSV     the same line from a saved CSV
    python3 gpuclock.py --self-test                 checks the reader and the summary on made-up samples
"""
import argparse
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

FIELDS = "timestamp,utilization.gpu,clocks.sm,clocks.max.sm,power.draw,power.limit,clocks_throttle_reasons.active"
FIELDS_OLD = "timestamp,utilization.gpu,clocks.sm,clocks.max.sm,power.draw,power.limit"  # a driver without the reasons field
SW_POWER_CAP = 0x4  # nvidia-smi's reason bit: software power cap


def num(s):
    try:
        return float(s.strip().split()[0])
    except (ValueError, IndexError):
        return None


def read(f):
    """The samples of an nvidia-smi CSV (noheader, with or without units): dicts with util, clk,
    maxclk, power, limit and cap (None where the field is absent or unreadable)."""
    out = []
    for ln in f:
        p = [x.strip() for x in ln.split(",")]
        if len(p) < 6 or num(p[2]) is None:
            continue
        cap = None
        if len(p) > 6:
            try:
                cap = bool(int(p[6], 16) & SW_POWER_CAP)
            except ValueError:
                cap = None
        out.append({"util": num(p[1]), "clk": num(p[2]), "maxclk": num(p[3]), "power": num(p[4]), "limit": num(p[5]), "cap": cap})
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]


def summary(samples, label, seconds=None):
    busy = [s for s in samples if s["util"] is not None and s["util"] >= 50]
    head = "gpuclock %s: " % label
    if not busy:
        return head + "%d samples, none busy (utilization under 50%%): nothing to say" % len(samples)
    clk = [s["clk"] for s in busy]
    pw = [s["power"] for s in busy if s["power"] is not None]
    lim = [s["limit"] for s in busy if s["limit"] is not None]
    caps = [s["cap"] for s in busy if s["cap"] is not None]
    mx = max((s["maxclk"] for s in busy if s["maxclk"] is not None), default=None)
    line = head + "%d busy samples of %d%s: SM clock median %.0f MHz (10%%-90%%: %.0f-%.0f%s)" % (
        len(busy), len(samples), " over %.1f s" % seconds if seconds else "", statistics.median(clk), pct(clk, 0.1), pct(clk, 0.9),
        ", max %.0f" % mx if mx else "")
    if pw:
        line += ", power mean %.0f W" % statistics.mean(pw) + (" of the %.0f W limit" % statistics.median(lim) if lim else "")
    if caps:
        line += ", power cap active in %.0f%% of the busy samples" % (100.0 * sum(caps) / len(caps))
    return line


def sampler(interval, out):
    """nvidia-smi sampling into out (a file), or None without nvidia-smi; a driver that does not
    know the reasons field gets the query without it. The GPU: the first of CUDA_VISIBLE_DEVICES
    (an index or a UUID, as nvidia-smi -i takes them), else 0."""
    if not shutil.which("nvidia-smi"):
        return None
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    for fields in (FIELDS, FIELDS_OLD):
        p = subprocess.Popen(["nvidia-smi", "-i", gpu, "--query-gpu=" + fields, "--format=csv,noheader,nounits", "-lms", str(interval)],
                             stdout=out, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        if p.poll() is None or p.returncode == 0:
            return p
    return None


def stop(p):
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()


def run(a):
    """The command under the sampler; its exit status (127: it could not be started; 128 + n:
    killed by signal n). The sampler stops however the command ends, also when this process is
    sent SIGTERM."""
    if not a.command:
        sys.exit("gpuclock.py run: no command (put it after --)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with (open(a.o, "w+") if a.o else tempfile.TemporaryFile(mode="w+")) as buf:
        smp = None
        try:
            smp = sampler(a.interval, buf)
            t0 = time.time()
            try:
                rc = subprocess.call(a.command)
            except OSError as e:
                print("gpuclock %s: cannot run %s: %s" % (a.label, a.command[0], e), file=sys.stderr, flush=True)
                rc = 127
            secs = time.time() - t0
        finally:
            stop(smp)
        if smp is None:
            print("gpuclock %s: no nvidia-smi (or it failed): nothing sampled" % a.label, flush=True)
        else:
            buf.seek(0)
            print(summary(read(buf), a.label, secs), flush=True)
    return 128 - rc if rc < 0 else rc


def self_test():
    text = """2026/12/06 19:13:00.100, 0, 345, 1980, 70.1, 700.00, 0x0000000000000000
2026/12/06 19:13:00.200, 100, 1500, 1980, 705.2, 700.00, 0x0000000000000004
2026/12/06 19:13:00.300, 100, 1600, 1980, 690.0, 700.00, 0x0000000000000000
2026/12/06 19:13:00.400, 99, 1400, 1980, 710.0, 700.00, 0x0000000000000004
2026/12/06 19:13:00.500, 98, 1980, 1980, 400.0, 700.00, 0x0000000000000000
garbage line
"""
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok: " if cond else "FAIL: ") + what)
        ok = ok and cond

    s = read(io.StringIO(text))
    check(len(s) == 5 and s[1]["cap"] is True and s[2]["cap"] is False, "five samples; the power-cap bit read")
    line = summary(s, "ours", 2.0)
    check("4 busy samples of 5 over 2.0 s" in line, "idle samples left out: " + line)
    check("median 1550 MHz" in line and "max 1980" in line, "the median of the busy clocks (1400, 1500, 1600, 1980)")
    check("power mean 626 W of the 700 W limit" in line, "mean power of the busy samples")
    check("power cap active in 50% of the busy samples" in line, "the share at the cap")
    old = read(io.StringIO("2026/12/06 19:13:00.200, 100 %, 1500 MHz, 1980 MHz, 705.20 W, 700.00 W\n"))
    check(len(old) == 1 and old[0]["clk"] == 1500 and old[0]["cap"] is None and "cap" not in summary(old, "x"),
          "units and no reasons field: no cap share claimed")
    check("none busy" in summary(read(io.StringIO(text.splitlines()[0] + "\n")), "x"), "an idle run says so")
    return 0 if ok else 1


def main():
    if "--self-test" in sys.argv[1:2]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode")
    r = sub.add_parser("run", help="run a command with the clock and power sampled")
    r.add_argument("--label", default="run")
    r.add_argument("-o", metavar="CSV", help="keep the samples here")
    r.add_argument("--interval", type=int, default=100, help="ms between samples (default 100)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("summary", help="the line from a saved CSV")
    s.add_argument("--label", default="run")
    s.add_argument("csv")
    a = ap.parse_args()
    if a.mode == "run":
        if a.command and a.command[0] == "--":
            a.command = a.command[1:]
        return run(a)
    if a.mode == "summary":
        with open(a.csv) as f:
            print(summary(read(f), a.label))
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
