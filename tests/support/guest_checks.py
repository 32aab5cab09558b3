"""What the guest system tests observe inside a guest (scripts/guest).

Run in the guest as ``python tests/support/guest_checks.py PLAN [ARG...]``
(tests/support/guest.py does that); prints one JSON object: facts only, the
host-side tests assert on them.  Standard library only, tumbler through its
command line, as an admin would run it: at nice -20 (tumbler(8): a loaded
machine starves a tumbler started at 0), attached to running programs.

No step is timed: every wait has a guard (WAIT_S) that ends the step with
what was seen, so a defect shows as a fact the host test names, not as a
hang.  The guest is slow (TCG, several vCPUs per host CPU): the guards are
long, and workloads run on a monotonic deadline (sleep() once returned
early in such a guest).
"""

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Failure guard for each wait (never asserted on): tumbler's start-up alone
# took 14 s of wall in a busy 4-vCPU guest (issue 48), 125-144 s in a busy
# 16-vCPU one.
WAIT_S = float(os.environ.get("GUEST_CHECKS_WAIT_S", "300"))
# The uneven program: duty(1) threads spinning these shares of each 20 ms;
# over two sockets {80, 20} and {60, 40} carry 1.0 CPU each.
DUTY = ("80", "60", "40", "20")


class Facts(dict):
    """What a plan saw; each fact said on stderr as it is set (the host
    test shows that log when the plan fails)."""

    def __setitem__(self, key, value):
        print("guest_checks: %.1f s: %s = %s" % (time.monotonic(), key, json.dumps(value)[:200]),
              file=sys.stderr, flush=True)
        super().__setitem__(key, value)


def tumbler(*args):
    return ["nice", "-n", "-20", sys.executable, "-m", "tumbler", *args]


def topology():
    proc = subprocess.run(tumbler("topology", "--json", "--sample", "0"),
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()}
    return json.loads(proc.stdout)


def read(path):
    with open(path) as f:
        return f.read().strip()


def nodes():
    """{node: {"cpus": list, "memory_kb": int}} from sysfs."""
    out = {}
    base = "/sys/devices/system/node"
    for name in sorted(os.listdir(base)):
        if name.startswith("node") and name[4:].isdigit():
            mem = 0
            for line in read(os.path.join(base, name, "meminfo")).splitlines():
                if "MemTotal:" in line:
                    mem = int(line.split()[-2])
            out[name[4:]] = {"cpus": read(os.path.join(base, name, "cpulist")), "memory_kb": mem}
    return out


def set_online(cpus, online):
    """Take CPUS off-line or on-line.  Bringing a vCPU up can fail (EIO)
    when the kernel's wait for it runs out, as under a heavily loaded host
    (seen at a load average of 150): tried again until WAIT_S."""
    for cpu in cpus:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with open("/sys/devices/system/cpu/cpu%d/online" % cpu, "w") as f:
                    f.write("1" if online else "0")
                break
            except OSError as exc:
                if exc.errno != errno.EIO or time.monotonic() > deadline:
                    raise
                print("guest_checks: cpu%d %s: %s, again" % (cpu, online, exc), file=sys.stderr)
                time.sleep(1)


def packages():
    """{package id: sorted CPUs} of the online CPUs."""
    out = {}
    for cpu in sorted(online_cpus()):
        pkg = int(read("/sys/devices/system/cpu/cpu%d/topology/physical_package_id" % cpu))
        out.setdefault(pkg, []).append(cpu)
    return out


def online_cpus():
    cpus = set()
    for part in read("/sys/devices/system/cpu/online").split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def masks(pid):
    """{thread name + tid: sorted CPUs} of every thread of PID."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            name = read("/proc/%d/task/%s/comm" % (pid, tid))
            out["%s/%s" % (name, tid)] = sorted(os.sched_getaffinity(int(tid)))
        except OSError:
            pass
    return out


def wait(cond):
    """Poll COND until true or WAIT_S passed; True if it became true."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def workers_split(pid, sets):
    """Every duty thread bound to exactly one of SETS (sorted CPU lists),
    and more than one of SETS used."""
    workers = {k: v for k, v in masks(pid).items() if k.startswith("duty-")}
    if len(workers) != len(DUTY) or any(v not in sets for v in workers.values()):
        return False
    return len({tuple(v) for v in workers.values()}) > 1


def start_duty(duty, seconds):
    prog = subprocess.Popen([duty, str(seconds), *DUTY])
    wait(lambda: len(masks(prog.pid)) >= len(DUTY) + 1)
    return prog


def end(proc, signum=None):
    """Send SIGNUM (if any), wait up to WAIT_S; (exit status or None, stderr tail)."""
    if signum is not None and proc.poll() is None:
        proc.send_signal(signum)
    try:
        proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, "still running after %d s: killed" % WAIT_S
    err = proc.stderr.read() if proc.stderr else ""
    return proc.returncode, err[-2000:]


def attach_run(duty, how):
    """``tumbler -p`` on the uneven program, ended by HOW: sigterm, sigint,
    duration (--duration), program (the program exits first), offline (a
    socket's CPUs off-line and back during the run, then SIGTERM)."""
    pkgs = packages()
    sets = [cpus for cpus in pkgs.values()]
    prog = start_duty(duty, 900 if how != "program" else 120)
    fact = Facts()
    fact.update({"before": masks(prog.pid), "packages": sets})
    args = ["--policy", "tumbler", "-p", str(prog.pid)]
    if how == "duration":
        args += ["--duration", "60"]
    log = "/tmp/guest-checks.%d.stderr" % prog.pid
    with open(log, "w") as err:     # the child keeps its own copy of the descriptor
        tum = subprocess.Popen(tumbler(*args), stderr=err, text=True, cwd=REPO)
    fact["split"] = wait(lambda: workers_split(prog.pid, sets))
    fact["during"] = masks(prog.pid)
    if how == "offline":
        last = sets[-1]
        rest = "%d-%d" % (sets[0][0], sets[0][-1])
        set_online(last, False)
        fact["offline_cpus"] = last
        # Until tumbler has seen one domain left (and so handed the
        # threads back to the OS), not only the kernel's own resets.
        fact["offline_seen"] = wait(
            lambda: re.search(r"off-line: domains %s$" % rest, read(log), re.M))
        fact["offline_alive"] = tum.poll() is None
        fact["during_offline"] = masks(prog.pid)
        set_online(last, True)
        fact["online_seen"] = wait(
            lambda: re.search(r"on-line: domains %s / %d-%d$" % (rest, last[0], last[-1]),
                              read(log), re.M))
        fact["split_again"] = wait(lambda: workers_split(prog.pid, sets))
        fact["during_online_again"] = masks(prog.pid)
    signum = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT,
              "offline": signal.SIGTERM}.get(how)
    if how == "program":
        prog.terminate()
        prog.wait()
    # stderr went to LOG (read above while waiting), not to a pipe: end()
    # has none to give, so only its exit status is kept from it.
    fact["status"], killed = end(tum, signum)
    fact["stderr"] = (killed + "\n" if fact["status"] is None else "") + read(log)[-2000:]
    os.unlink(log)
    fact["after"] = masks(prog.pid)
    if prog.poll() is None:
        prog.kill()
        prog.wait()
    return fact


def exec_run(duty):
    """``tumbler exec`` of the uneven program: bound across the sockets
    while it runs; tumbler's exit status is the program's."""
    sets = [cpus for cpus in packages().values()]
    tum = subprocess.Popen(tumbler("--policy", "tumbler", "exec", "--", duty, "120", *DUTY),
                           stderr=subprocess.PIPE, text=True, cwd=REPO)
    child = []

    def bound():
        if not child:
            try:
                kids = read("/proc/%d/task/%d/children" % (tum.pid, tum.pid)).split()
            except OSError:
                return False
            # nice(1) execs tumbler in place: its children are the program.
            child.extend(int(k) for k in kids)
            if not child:
                return False
        return workers_split(child[0], sets)

    fact = Facts()
    fact.update({"packages": sets, "split": wait(bound)})
    fact["during"] = masks(child[0]) if child else {}
    fact["status"], fact["stderr"] = end(tum)
    return fact


def plan_topology(offline_package=None):
    """The topology as tumbler sees it, and with one package off-line."""
    fact = Facts()
    fact.update({"nodes": nodes(), "topology": topology()})
    if offline_package is not None:
        cpus = packages()[int(offline_package)]
        set_online(cpus, False)
        fact["offline_cpus"] = cpus
        fact["topology_offline"] = topology()
        set_online(cpus, True)
        fact["topology_online_again"] = topology()
    return fact


def plan_balance(duty):
    fact = Facts()
    fact.update({"topology": topology()})
    for how in ("sigterm", "sigint", "duration", "program", "offline"):
        fact["attach_" + how] = attach_run(duty, how)
    fact["exec"] = exec_run(duty)
    return fact


# Left out in a guest: its 5 ms tolerance between the probe's lock wait and
# the wall clock is the host's; a TCG guest's clock read was 43 ms off.
TIMED_ON_THE_HOST = "test_a_wait_in_progress_at_the_start_found_only_at_its_end"


def plan_pytest(*files):
    """Test files of the suite that skip on the host (cgroup v1 there, no
    bpftrace-capable kernel...), run here one by one: {file: exit status
    and pytest's output}."""
    env = dict(os.environ, TUMBLER_TEST_CGROUP_SWAP="0")
    out = {}
    for name in files:
        # pytest -v writes into the output share as it goes, so that a
        # guest that never ends still shows the test it was in (scripts/
        # guest prints the file's end when it times out: PROGRESS).
        progress = os.path.join(os.environ.get("GUEST_OUT", "/tmp"), "progress")
        with open(progress, "w") as log:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-rs", "-p",
                                   "no:cacheprovider", name, "-k", "not " + TIMED_ON_THE_HOST],
                                  stdout=log, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                  env=env)
        with open(progress) as log:
            output = log.read()
        out[name] = {"status": proc.returncode, "output": output[-6000:],
                     "stderr": proc.stderr[-2000:]}
    return out


SERVICE_RULES = """service:
  scan_interval: 1
programs:
  - name: duty
    match: {comm: "duty"}
    policy: tumbler
"""
# What the reload adds: a second rule (the journal then says 2 rules).
RELOADED_RULES = SERVICE_RULES + """  - name: other
    match: {comm: "no-such-program"}
"""


def systemctl(*args):
    proc = subprocess.run(["systemctl", *args], capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def unit_failed():
    """The unit has failed (exited for good, or systemd gave up restarting)."""
    return systemctl("is-failed", "--quiet", "tumbler")[0] == 0


def wait_unit(cond):
    """wait() for COND, given up at once if the unit fails meanwhile: a unit
    that cannot start would otherwise leave every later wait to run out
    (and the whole boot to the guest's --timeout)."""
    return wait(lambda: unit_failed() or cond()) and not unit_failed()


def main_pid():
    return int(systemctl("show", "-p", "MainPID", "--value", "tumbler")[1] or 0)


def journal():
    return subprocess.run(["journalctl", "-u", "tumbler", "--no-pager", "-o", "cat"],
                          capture_output=True, text=True).stdout[-4000:]


def managed(pid):
    proc = subprocess.run(tumbler("status", "--json"), capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        return False
    return pid in {p["pid"] for p in json.loads(proc.stdout)["programs"]}


def plan_systemd(duty):
    """The packaged unit (platform/systemd/tumbler.service) under systemd as
    PID 1: start, status over its socket, reload, stop, kill -9 and the
    restart systemd makes."""
    write = lambda path, text, mode=0o644: (os.makedirs(os.path.dirname(path), exist_ok=True),
                                             open(path, "w").write(text), os.chmod(path, mode))
    # The unit runs /usr/bin/tumbler: here, the checkout's (the guest's / is
    # an overlay in its memory).  Copied out of the checkout with what its
    # venv installed, under /usr/lib: the unit's PrivateTmp= hides /tmp,
    # where a clean clone may sit, and ProtectHome= leaves /root readable
    # only -- enough for the interpreter the venv was made from.
    lib = "/usr/lib/tumbler-checkout"
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))
    subprocess.run(["rm", "-rf", lib], check=True)
    os.makedirs(lib)
    subprocess.run(["cp", "-a", os.path.join(REPO, "tumbler"), os.path.join(site, "click"),
                    os.path.join(site, "yaml"), lib], check=True)
    for name in os.listdir(site):           # PyYAML's C loader, where built
        if name.startswith("_yaml"):
            subprocess.run(["cp", "-a", os.path.join(site, name), lib], check=True)
    write("/usr/bin/tumbler", '#!/bin/sh\nPYTHONPATH=%s exec %s -m tumbler "$@"\n'
          % (lib, os.path.realpath(sys.executable)), 0o755)
    write("/etc/systemd/system/tumbler.service",
          read(os.path.join(REPO, "platform", "systemd", "tumbler.service")))
    write("/etc/tumbler/tumbler.yaml", SERVICE_RULES)
    fact = Facts()
    fact.update({"pid1": read("/proc/1/comm"), "daemon_reload": systemctl("daemon-reload")})
    prog = start_duty(duty, 1800)
    sets = [cpus for cpus in packages().values()]
    fact["before"] = masks(prog.pid)
    fact["start"] = systemctl("start", "tumbler")
    fact["status_lists"] = wait_unit(lambda: managed(prog.pid))
    if unit_failed():
        fact["unit_failed"] = systemctl("status", "--no-pager", "tumbler")[1][-2000:]
        fact["journal"] = journal()
        prog.kill()
        prog.wait()
        return fact
    fact["split"] = wait_unit(lambda: workers_split(prog.pid, sets))
    fact["during"] = masks(prog.pid)
    pid = main_pid()
    write("/etc/tumbler/tumbler.yaml", RELOADED_RULES)
    fact["reload"] = systemctl("reload", "tumbler")
    fact["reloaded"] = wait_unit(lambda: "configuration reloaded: 2 rule(s)" in journal())
    fact["same_pid_after_reload"] = main_pid() == pid
    fact["status_lists_after_reload"] = managed(prog.pid)
    fact["stop"] = systemctl("stop", "tumbler")
    fact["after_stop"] = masks(prog.pid)
    systemctl("start", "tumbler")
    fact["split_restarted"] = wait_unit(lambda: workers_split(prog.pid, sets))
    killed = main_pid()
    fact["kill9"] = systemctl("kill", "-s", "KILL", "--kill-who=main", "tumbler")
    fact["restarted_by_systemd"] = wait(
        lambda: main_pid() not in (0, killed) and systemctl("is-active", "tumbler")[0] == 0)
    fact["status_lists_after_restart"] = wait_unit(lambda: managed(prog.pid))
    fact["split_after_restart"] = wait_unit(lambda: workers_split(prog.pid, sets))
    fact["stop_after_restart"] = systemctl("stop", "tumbler")
    fact["after_restart_stop"] = masks(prog.pid)
    fact["journal"] = journal()
    prog.kill()
    prog.wait()
    return fact


PLANS = {"topology": plan_topology, "balance": plan_balance, "pytest": plan_pytest,
         "systemd": plan_systemd}


if __name__ == "__main__":
    print(json.dumps(PLANS[sys.argv[1]](*sys.argv[2:])))
