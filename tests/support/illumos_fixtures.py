"""Fixture trees for the illumos backend: binary /proc files and kstat text.

The writers place every field at its offset from illumos-gate
usr/src/uts/common/sys/procfs.h (LP64), listed here independently of the
parser's struct formats so that a wrong format in the backend makes the
tests fail instead of agreeing with itself.

A tree looks like::

    ROOT/kstat                          `kstat -p cpu_info:::` text (and
                                        `kstat -p pg_hw_perf:::` text)
    ROOT/proc/PID/psinfo                psinfo_t
    ROOT/proc/PID/lusage                prheader_t + prusage_t[nlwp + 1]
    ROOT/proc/PID/lpsinfo               prheader_t + lwpsinfo_t[nlwp + nzomb]
    ROOT/proc/PID/lwp/LWPID/lwpusage    prusage_t
    ROOT/proc/PID/lwp/LWPID/lwpsinfo    lwpsinfo_t
    ROOT/proc/PID/lwp/LWPID/lwpname     char[32]

Run ``python3 tests/support/illumos_fixtures.py DIR`` to build the example tree
(see ``build_example_tree``).
"""

import os
import struct
import sys

NANOSEC = 1_000_000_000
PRUSAGE_SIZE = 504
LWPSINFO_SIZE = 128
PSINFO_SIZE = 416
LWPNAME_SIZE = 32
# The kernel's stride of lusage and lpsinfo entries for an LP64 reader:
# LSPAN(), round16(sizeof) + 16 (usr/src/uts/common/fs/proc/prvnops.c).
PRUSAGE_SPAN = 528
LWPSINFO_SPAN = 144

# prusage_t: offset of each timestruc_t (procfs.h order).
PRUSAGE_TIMES = {
    "tstamp": 8, "create": 24, "term": 40, "rtime": 56, "utime": 72, "stime": 88,
    "ttime": 104, "tftime": 120, "dftime": 136, "kftime": 152, "ltime": 168,
    "slptime": 184, "wtime": 200, "stoptime": 216,
}
PRUSAGE_COUNTERS = {       # ulong_t from offset 328
    "minf": 328, "majf": 336, "nswap": 344, "inblk": 352, "oublk": 360, "msnd": 368,
    "mrcv": 376, "sigs": 384, "vctx": 392, "ictx": 400, "sysc": 408, "ioch": 416,
}

# lwpsinfo_t: (offset, struct code) of each field.
LWPSINFO_FIELDS = {
    "flag": (0, "i"), "lwpid": (4, "i"), "addr": (8, "Q"), "wchan": (16, "Q"),
    "stype": (24, "b"), "state": (25, "b"), "sname": (26, "c"), "nice": (27, "b"),
    "syscall": (28, "h"), "oldpri": (30, "b"), "cpu": (31, "b"), "pri": (32, "i"),
    "pctcpu": (36, "H"), "onpro": (96, "i"), "bindpro": (100, "i"),
    "bindpset": (104, "i"), "lgrp": (108, "i"),
}
LWPSINFO_TIMES = {"start": 40, "time": 56}
LWPSINFO_TEXT = {"clname": (72, 8), "name": (80, 16)}

# psinfo_t: (offset, struct code); pr_lwp (an lwpsinfo_t) is at 288.
PSINFO_FIELDS = {
    "flag": (0, "i"), "nlwp": (4, "i"), "pid": (8, "i"), "ppid": (12, "i"),
    "pgid": (16, "i"), "sid": (20, "i"), "uid": (24, "I"), "euid": (28, "I"),
    "gid": (32, "I"), "egid": (36, "I"), "size": (48, "Q"), "rssize": (56, "Q"),
    "ttydev": (72, "Q"), "pctcpu": (80, "H"), "pctmem": (82, "H"),
    "wstat": (232, "i"), "argc": (236, "i"), "taskid": (260, "i"),
    "projid": (264, "i"), "nzomb": (268, "i"), "poolid": (272, "i"),
    "zoneid": (276, "i"), "contract": (280, "i"),
}
PSINFO_TIMES = {"start": 88, "time": 104, "ctime": 120}
PSINFO_TEXT = {"fname": (136, 16), "psargs": (152, 80)}
PSINFO_LWP_OFFSET = 288

SSYS = 0x00000001
PS_NONE = -1
PBIND_NONE = -1


def _put_time(buf, offset, ns):
    struct.pack_into("=qq", buf, offset, ns // NANOSEC, ns % NANOSEC)


def _put_text(buf, offset, size, text):
    raw = text.encode("utf-8")[:size - 1]
    buf[offset:offset + len(raw)] = raw


def pack_prusage(lwp):
    """prusage_t from a dict: ``lwpid``, ``count`` and ``<time>_ns`` keys
    (names of PRUSAGE_TIMES) and counters (names of PRUSAGE_COUNTERS)."""
    buf = bytearray(PRUSAGE_SIZE)
    struct.pack_into("=ii", buf, 0, lwp.get("lwpid", 0), lwp.get("count", 1))
    for name, offset in PRUSAGE_TIMES.items():
        _put_time(buf, offset, lwp.get(name + "_ns", 0))
    for name, offset in PRUSAGE_COUNTERS.items():
        struct.pack_into("=Q", buf, offset, lwp.get(name, 0))
    return bytes(buf)


def pack_lwpsinfo(lwp):
    """lwpsinfo_t from a dict (keys of LWPSINFO_FIELDS, ``start_ns``,
    ``time_ns``, ``clname``, ``name``); unbound unless told otherwise."""
    values = {"sname": "S", "onpro": 0, "bindpro": PBIND_NONE, "bindpset": PS_NONE,
              "clname": "TS", "pri": 59}
    values.update(lwp)
    buf = bytearray(LWPSINFO_SIZE)
    for name, (offset, code) in LWPSINFO_FIELDS.items():
        value = values.get(name, 0)
        if code == "c":
            value = value.encode("ascii")
        struct.pack_into("=" + code, buf, offset, value)
    for name, offset in LWPSINFO_TIMES.items():
        _put_time(buf, offset, values.get(name + "_ns", 0))
    for name, (offset, size) in LWPSINFO_TEXT.items():
        _put_text(buf, offset, size, values.get(name, ""))
    return bytes(buf)


def pack_psinfo(proc, representative):
    """psinfo_t from a dict (keys of PSINFO_FIELDS, ``start_ns``, ``fname``,
    ``psargs``) with ``representative`` (an lwpsinfo dict) as pr_lwp."""
    buf = bytearray(PSINFO_SIZE)
    for name, (offset, code) in PSINFO_FIELDS.items():
        struct.pack_into("=" + code, buf, offset, proc.get(name, 0))
    for name, offset in PSINFO_TIMES.items():
        _put_time(buf, offset, proc.get(name + "_ns", 0))
    for name, (offset, size) in PSINFO_TEXT.items():
        _put_text(buf, offset, size, proc.get(name, ""))
    lwp = pack_lwpsinfo(representative or {})
    buf[PSINFO_LWP_OFFSET:PSINFO_LWP_OFFSET + LWPSINFO_SIZE] = lwp
    return bytes(buf)


def pack_table(entries, entsize):
    """prheader_t then the entries, each padded to ``entsize`` bytes."""
    out = bytearray(struct.pack("=qq", len(entries), entsize))
    for entry in entries:
        out += entry + bytes(entsize - len(entry))
    return bytes(out)


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:       # in place: an open fd sees the new data
        f.write(data)


def write_process(root, pid, proc, lwps, exited=None, zombies=(),
                  usage_entsize=PRUSAGE_SPAN, lpsinfo_entsize=LWPSINFO_SPAN):
    """Write /proc/PID of a process.

    ``proc``: psinfo dict (pid, nlwp, nzomb filled in when absent).
    ``lwps``: one dict per live LWP, with prusage keys (``utime_ns``...) and
    lwpsinfo keys (``sname``, ``onpro``, ``name``...) together, plus
    ``lwpname`` (the user thread name file; omitted when None).
    ``exited``: prusage dict of entry 0 of lusage (LWPs that exited).
    ``zombies``: lwpsinfo dicts of zombie LWPs (lpsinfo only, as the kernel).
    """
    base = os.path.join(root, "proc", str(pid))
    proc = dict(proc)
    proc.setdefault("pid", pid)
    proc.setdefault("nlwp", len(lwps))
    proc.setdefault("nzomb", len(zombies))
    _write(base + "/psinfo", pack_psinfo(proc, lwps[0] if lwps else None))
    entry0 = dict(exited or {})
    entry0["lwpid"] = 0
    _write(base + "/lusage", pack_table(
        [pack_prusage(entry0)] + [pack_prusage(lwp) for lwp in lwps], usage_entsize))
    zombie_infos = [dict(z, sname="Z", bindpro=PBIND_NONE, bindpset=PS_NONE) for z in zombies]
    _write(base + "/lpsinfo", pack_table(
        [pack_lwpsinfo(lwp) for lwp in list(lwps) + zombie_infos], lpsinfo_entsize))
    for lwp in lwps:
        lwp_dir = "%s/lwp/%d" % (base, lwp["lwpid"])
        _write(lwp_dir + "/lwpusage", pack_prusage(lwp))
        _write(lwp_dir + "/lwpsinfo", pack_lwpsinfo(lwp))
        if lwp.get("lwpname") is not None:
            name = lwp["lwpname"].encode("utf-8")[:LWPNAME_SIZE - 1]
            _write(lwp_dir + "/lwpname", name + bytes(LWPNAME_SIZE - len(name)))
    for zombie in zombie_infos:
        _write("%s/lwp/%d/lwpsinfo" % (base, zombie["lwpid"]), pack_lwpsinfo(zombie))


def kstat_text(cpus):
    """``kstat -p cpu_info:::`` text for dicts with ``id``, ``state``,
    ``chip_id``, ``core_id`` and optionally ``cache_id`` (x86 only)."""
    lines = []
    for cpu in cpus:
        prefix = "cpu_info:%d:cpu_info%d:" % (cpu["id"], cpu["id"])
        lines.append(prefix + "brand\tIntel(r) Xeon(r) CPU E5-2680 v4 @ 2.40GHz")
        lines.append(prefix + "chip_id\t%d" % cpu["chip_id"])
        lines.append(prefix + "class\tmisc")
        lines.append(prefix + "clock_MHz\t2400")
        lines.append(prefix + "core_id\t%d" % cpu["core_id"])
        if "cache_id" in cpu:
            lines.append(prefix + "cache_id\t%d" % cpu["cache_id"])
        lines.append(prefix + "crtime\t%d.123456789" % (30 + cpu["id"]))
        lines.append(prefix + "state\t%s" % cpu.get("state", "on-line"))
        lines.append(prefix + "state_begin\t1700000000")
    return "\n".join(lines) + "\n"


def pg_hw_perf_text(groups):
    """``kstat -p pg_hw_perf:::`` text for (relationship, cpus) pairs, e.g.
    ("Cache", "0-7"), as usr/src/uts/common/os/pghw.c names and fills them:
    kstat name = relationship with blanks as "_", ``cpus`` a group2intlist
    string, ``ncpus`` its size (``ncpus`` may be given as a third item to
    fake a cut-short list)."""
    lines = []
    for pg_id, group in enumerate(groups, start=1):
        relationship, cpus = group[:2]
        ncpus = group[2] if len(group) > 2 else _count_cpus(cpus)
        prefix = "pg_hw_perf:%d:%s:" % (pg_id, relationship.replace(" ", "_"))
        lines += [prefix + "class\tprocessor_group", prefix + "cpus\t%s" % cpus,
                  prefix + "generation\t3", prefix + "hw_util\t0",
                  prefix + "ncpus\t%d" % ncpus, prefix + "parent_pg_id\t-1",
                  prefix + "pg_id\t%d" % pg_id, prefix + "relationship\t%s" % relationship]
    return "\n".join(lines) + "\n"


def _count_cpus(cpulist):
    count = 0
    for item in filter(None, cpulist.split(",")):
        first, _, last = item.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def write_kstat(root, cpus, processor_groups=()):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "kstat"), "w") as f:
        f.write(kstat_text(cpus))
        if processor_groups:
            f.write(pg_hw_perf_text(processor_groups))


def machine(sockets, llcs_per_socket, cores_per_llc, threads_per_core, offline=()):
    """CPU dicts of a regular x86 machine, CPU ids in package order."""
    cpus = []
    for cpu_id in range(sockets * llcs_per_socket * cores_per_llc * threads_per_core):
        core = cpu_id // threads_per_core
        llc = core // cores_per_llc
        cpus.append({"id": cpu_id, "chip_id": llc // llcs_per_socket, "core_id": core,
                     "cache_id": llc, "state": "off-line" if cpu_id in offline else "on-line"})
    return cpus


EXAMPLE_PID = 4242


def example_lwps():
    """Four LWPs of pid 4242 with different loads (ns since creation)."""
    second = NANOSEC
    rows = [
        # lwpid, name, usr, sys, lck, slp, lat, cpu, state
        (1, "main", 2 * second, 1 * second // 2, 0, 37 * second, second // 10, 0, "S"),
        (2, "compute-0", 30 * second, 1 * second, 2 * second, 5 * second, 2 * second, 2, "O"),
        (3, "compute-1", 18 * second, 2 * second, 6 * second, 12 * second, second, 8, "R"),
        (4, "io", 1 * second, 3 * second, 0, 35 * second, second // 5, 9, "S"),
    ]
    lwps = []
    for lwpid, name, usr, sys_, lck, slp, lat, cpu, state in rows:
        rtime = usr + sys_ + lck + slp + lat
        lwps.append({"lwpid": lwpid, "lwpname": name, "utime_ns": usr, "stime_ns": sys_,
                     "ltime_ns": lck, "slptime_ns": slp, "wtime_ns": lat,
                     "rtime_ns": rtime, "create_ns": 1000 * second + lwpid,
                     "tstamp_ns": 1000 * second + rtime, "onpro": cpu, "sname": state,
                     "start_ns": 1_700_000_000 * second, "vctx": 1000 * lwpid})
    return lwps


def build_example_tree(directory):
    """A 2-socket machine, 2 LLCs per socket, 2 cores per LLC, 2 threads per
    core (16 CPUs, CPU 15 off-line), and a 4-LWP process 4242 ("worker").

    Try: ``tumbler --platform illumos --root DIR topology`` and
    ``tumbler --platform illumos --root DIR stat -p 4242``.
    """
    write_kstat(directory, machine(2, 2, 2, 2, offline={15}))
    proc = {"fname": "worker", "psargs": "./worker -t 4", "uid": 1000, "euid": 1000,
            "ppid": 1, "start_ns": 1_700_000_000 * NANOSEC}
    write_process(directory, EXAMPLE_PID, proc, example_lwps(),
                  exited={"count": 2, "utime_ns": 5 * NANOSEC, "rtime_ns": 9 * NANOSEC})
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: %s DIR" % sys.argv[0])
    print(build_example_tree(sys.argv[1]))
