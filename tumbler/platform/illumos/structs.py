"""Binary layouts of the illumos /proc files tumbler reads, and their parsers.

Checked against illumos-gate ``usr/src/uts/common/sys/procfs.h`` (structured
/proc, ``_STRUCTURED_PROC``) and the kernel code that fills the files,
``usr/src/uts/common/fs/proc/prvnops.c`` (``pr_read_lusage``,
``pr_read_lpsinfo``, ``pr_read_psinfo``, ``pr_read_lwpsinfo``).  Offsets are
for LP64 readers (amd64, sparcv9): /proc hands a 32-bit reader the
``*32_t`` variants instead, which tumbler does not parse.

``timestruc_t`` is ``{int64 tv_sec; int64 tv_nsec}``, 16 bytes.

``/proc/PID/lusage`` and ``/proc/PID/lpsinfo`` start with ``prheader_t``
``{long pr_nent; long pr_entsize}``, then ``pr_nent`` entries, each
``pr_entsize`` bytes apart: ``LSPAN()``, ``round16(sizeof (type)) + 16``
for an LP64 reader (usr/src/uts/common/fs/proc/prvnops.c: larger than the
struct on purpose, so that no reader uses the struct size), 528 for
``prusage_t`` and 144 for ``lwpsinfo_t``.  The stride is read from the
header, never assumed.

``prusage_t`` (504 bytes; ``lusage`` entries and ``lwp/LWPID/lwpusage``)::

      0 id_t pr_lwpid        (0 in entry 0 of lusage: the sum over LWPs
      4 int  pr_count         that already exited -- skipped)
      8 timestruc pr_tstamp  (gethrtime() of the read)
     24 timestruc pr_create  (LWP creation, hrtime: the start token)
     40 pr_term   56 pr_rtime (elapsed, the prstat -m denominator)
     72 pr_utime  88 pr_stime  104 pr_ttime  120 pr_tftime  136 pr_dftime
    152 pr_kftime 168 pr_ltime (user lock wait)  184 pr_slptime
    200 pr_wtime (waiting for a CPU: LAT)  216 pr_stoptime
    232 filltime[6]  328 ulong pr_minf ... pr_ioch (12)  424 ulong filler[10]

``lusage`` has one entry per *live* LWP (plus entry 0); zombie LWPs appear
only in ``lpsinfo``.

``lwpsinfo_t`` (128 bytes; ``lpsinfo`` entries, ``lwp/LWPID/lwpsinfo``, and
the last member of ``psinfo_t``)::

      0 int pr_flag   4 id_t pr_lwpid   8 uintptr pr_addr   16 pr_wchan
     24 char pr_stype  25 pr_state  26 pr_sname  27 pr_nice
     28 short pr_syscall  30 char pr_oldpri  31 pr_cpu  32 int pr_pri
     36 ushort pr_pctcpu  38 pr_pad  40 timestruc pr_start  56 pr_time
     72 char pr_clname[8]  80 char pr_name[16]  96 processorid_t pr_onpro
    100 pr_bindpro  104 psetid_t pr_bindpset  108 int pr_lgrp  112 filler[4]

``pr_stype`` is the type of the synchronisation object a sleeping LWP
sleeps on (``SOBJ_TYPE(t->t_sobj_ops)``, usr/src/uts/common/sys/sobject.h),
``pr_syscall`` the system call it is in (``t->t_sysnum``, 0 if none): both
set by ``prgetlwpsinfo`` (prsubr.c).

``pr_name`` is always empty: ``prgetlwpsinfo`` (usr/src/uts/common/fs/proc/
prsubr.c) zeroes the struct and never sets it, so it is not parsed; thread
names (pthread_setname_np, illumos RFD 96) live in
``/proc/PID/lwp/LWPID/lwpname``.

``psinfo_t`` (416 bytes)::

      0 int pr_flag (only SSYS 0x1 and SMSACCT are exported)  4 pr_nlwp
      8 pid_t pr_pid  12 pr_ppid  16 pr_pgid  20 pr_sid  24 uid_t pr_uid
     28 pr_euid  32 pr_gid  36 pr_egid  40 uintptr pr_addr  48 pr_size
     56 pr_rssize  64 pr_pad1  72 dev_t pr_ttydev  80 ushort pr_pctcpu
     82 pr_pctmem  (4 bytes padding)  88 timestruc pr_start  104 pr_time
    120 pr_ctime  136 char pr_fname[16]  152 char pr_psargs[80]
    232 pr_wstat  236 pr_argc  240 pr_argv  248 pr_envp  256 char pr_dmodel
    260 pr_taskid  264 pr_projid  268 pr_nzomb  272 pr_poolid  276 pr_zoneid
    280 pr_contract  284 filler[1]  288 lwpsinfo_t pr_lwp

Formats use native byte order with standard sizes (``=``), so the same code
reads a big-endian sparcv9 /proc; padding is spelled out with ``x``.
"""

import struct
from collections import namedtuple

from ...escape import printable

NANOSEC = 1_000_000_000

#: psinfo_t.pr_flag bit of a system (kernel) process, usr/src/uts/common/sys/proc.h.
SSYS = 0x00000001
#: Unbound values of pr_bindpro / pr_bindpset (PBIND_NONE, PS_NONE).
PBIND_NONE = -1
PS_NONE = -1

PRHEADER = struct.Struct("=qq")

# Whole structs, for the sizes; parsing uses the shorter heads below.
PRUSAGE = struct.Struct("=ii" + "qq" * 20 + "Q" * 22)
LWPSINFO = struct.Struct("=iiQQcccchbbiHHqqqq8s16siiii16x")
PSINFO_HEAD = struct.Struct("=iiiiiiiiiiQQQQQHH4xqqqqqq16s80siiQQc3xiiiiiii")
PSINFO_SIZE = PSINFO_HEAD.size + LWPSINFO.size


def lspan(size):
    """The stride the kernel gives entries of ``size`` bytes in the table
    files, for an LP64 reader (``LSPAN()``, prvnops.c)."""
    return (size + 15) // 16 * 16 + 16

# prusage_t up to and including pr_wtime: lwpid, pad, then 13 timestrucs
# (tstamp, create, term, rtime, utime, stime, ttime, tftime, dftime,
# kftime, ltime, slptime, wtime) as 26 int64.
_PRUSAGE_HEAD = struct.Struct("=i4x26q")

LwpUsage = namedtuple("LwpUsage", "lwpid create_ns rtime_ns utime_ns stime_ns ttime_ns "
                      "tftime_ns dftime_ns ltime_ns slptime_ns wtime_ns")
LwpInfo = namedtuple("LwpInfo", "lwpid sname onpro bindpro bindpset lgrp stype syscall")
PsInfo = namedtuple("PsInfo", "flag nlwp pid ppid uid start_ns fname nzomb psargs time_ns "
                                "projid zoneid")


class Truncated(ValueError):
    """The buffer is shorter than its header says: read it again, larger."""

    def __init__(self, needed):
        self.needed = needed
        super().__init__("need %d bytes" % needed)


def _entries(data, minimum_size):
    """Offsets of the entries of a prheader_t-prefixed table."""
    if len(data) < PRHEADER.size:
        raise Truncated(PRHEADER.size)
    nent, entsize = PRHEADER.unpack_from(data, 0)
    if nent < 0 or (nent and entsize < minimum_size):
        raise ValueError("bad prheader_t: pr_nent=%d pr_entsize=%d" % (nent, entsize))
    needed = PRHEADER.size + nent * entsize
    if len(data) < needed:
        raise Truncated(needed)
    return range(PRHEADER.size, needed, entsize)


def _ns(sec, nsec):
    return sec * NANOSEC + nsec


def _text(raw):
    """A NUL-terminated name any user chose, ``printable`` (escape.py)."""
    return printable(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))


def parse_lusage(data):
    """LwpUsage of every live LWP in a ``lusage`` buffer, entry 0 skipped."""
    offsets = _entries(data, _PRUSAGE_HEAD.size)
    result = []
    unpack = _PRUSAGE_HEAD.unpack_from
    for offset in offsets[1:]:
        v = unpack(data, offset)
        result.append(LwpUsage(
            lwpid=v[0], create_ns=_ns(v[3], v[4]), rtime_ns=_ns(v[7], v[8]),
            utime_ns=_ns(v[9], v[10]), stime_ns=_ns(v[11], v[12]),
            ttime_ns=_ns(v[13], v[14]), tftime_ns=_ns(v[15], v[16]),
            dftime_ns=_ns(v[17], v[18]), ltime_ns=_ns(v[21], v[22]),
            slptime_ns=_ns(v[23], v[24]), wtime_ns=_ns(v[25], v[26])))
    return result


def parse_lwpsinfo(data, offset=0):
    """LwpInfo of the lwpsinfo_t at ``offset``."""
    v = LWPSINFO.unpack_from(data, offset)
    return LwpInfo(lwpid=v[1], sname=v[6].decode("ascii", "replace"),
                   onpro=v[20], bindpro=v[21], bindpset=v[22], lgrp=v[23],
                   stype=v[4][0], syscall=v[8])


def parse_lpsinfo(data):
    """LwpInfo of every LWP (zombies included, pr_sname 'Z') in ``lpsinfo``."""
    return [parse_lwpsinfo(data, offset) for offset in _entries(data, LWPSINFO.size)]


def parse_psinfo(data):
    """PsInfo from a psinfo_t buffer."""
    if len(data) < PSINFO_HEAD.size:
        raise ValueError("short psinfo_t: %d bytes" % len(data))
    v = PSINFO_HEAD.unpack_from(data, 0)
    return PsInfo(flag=v[0], nlwp=v[1], pid=v[2], ppid=v[3], uid=v[6], start_ns=_ns(v[17], v[18]),
                  fname=_text(v[23]), nzomb=v[32], psargs=_text(v[24]),
                  time_ns=_ns(v[19], v[20]), projid=v[31], zoneid=v[34])
