"""CPU topology facts from the illumos ``cpu_info`` kstats.

Every CPU has a named kstat ``cpu_info:<cpuid>:cpu_info<cpuid>``; the fields
tumbler uses are (usr/src/uts/common/os/cpu.c, ``cpu_info_template`` and
``cpu_info_kstat_update``):

* ``state``    KSTAT_DATA_CHAR  ``"on-line"``, ``"no-intr"``, ``"off-line"``,
               ``"powered-off"``, ``"faulted"``, ``"spare"``;
* ``chip_id``  KSTAT_DATA_LONG (int64 for LP64 readers): the socket;
* ``core_id``  KSTAT_DATA_LONG: the core (``pg_plat_get_core_id``);
* ``cache_id`` KSTAT_DATA_INT32, x86 only: id of the last-level cache.

Processor groups (usr/src/uts/common/os/pghw.c): every hardware sharing
relationship the CMT scheduler knows (on x86 and SPARC alike) has a named
kstat ``pg_hw_perf:<pg id>:<relationship>``, with

* ``relationship`` KSTAT_DATA_STRING: ``"Cache"`` (CPUs sharing a cache,
               the last-level one on x86), ``"Socket"`` (a chip),
               ``"Integer Pipeline"``, ``"Floating Point Unit"``, ...;
* ``cpus``     KSTAT_DATA_STRING: its CPUs as ``group2intlist`` writes them,
               ``"1,2-5,8"`` -- empty until first filled in, and cut short
               if it does not fit;
* ``ncpus``    KSTAT_DATA_UINT32: how many CPUs it has (to detect the two).

The ``pg:<pg id>:pg`` kstats name the same groups (``hardware``) but carry
no CPU list.  A group exists only for a relationship that more than one
CPU shares (``pg_plat_hw_shared``), so they may not cover every CPU.
``read_system_pg`` reads them (``PG_FIELDS``).

Three sources, all returning ``{cpuid: {field: value}}``:

* ``read_kstat_text`` parses ``kstat -p`` output (``module:instance:name:
  statistic<TAB>value``); fixture trees keep it in ``ROOT/kstat``;
* ``LibKstat`` walks the kstat chain through libkstat with ctypes
  (``kstat_open``, ``kstat_read``, ``kstat_data_lookup``, ``kstat_close``);
* ``run_kstat_command`` runs ``kstat -p cpu_info:::`` when libkstat cannot
  be loaded.

Struct layouts (usr/src/uts/common/sys/kstat.h, usr/src/lib/libkstat/kstat.h), LP64:
``kstat_ctl_t`` is ``{kid_t kc_chain_id; kstat_t *kc_chain; int kc_kd}``;
``kstat_t`` begins ``{hrtime_t ks_crtime; kstat_t *ks_next; kid_t ks_kid;
char ks_module[31]; uchar_t ks_resv; int ks_instance; char ks_name[31];
uchar_t ks_type; ...}``; ``kstat_named_t`` is 48 bytes: ``char name[31]``,
``uchar_t data_type`` at 31, the value union at 32 (``c[16]`` for CHAR; for
STRING a ``char *`` at 32 and a ``uint32_t len`` at 40).
"""

import ctypes
import errno
import re
import subprocess

CPU_INFO_FIELDS = ("state", "chip_id", "core_id", "cache_id")
PG_FIELDS = ("relationship", "cpus", "ncpus")

KSTAT_TYPE_NAMED = 1
KSTAT_DATA_CHAR, KSTAT_DATA_INT32, KSTAT_DATA_UINT32 = 0, 1, 2
KSTAT_DATA_INT64, KSTAT_DATA_UINT64, KSTAT_DATA_STRING = 3, 4, 9
KSTAT_STRLEN = 31
KSTAT_NAMED_SIZE = 48
_NAMED_TYPE_OFFSET = 31
_NAMED_VALUE_OFFSET = 32

_INTEGER = re.compile(r"-?[0-9]+\Z")


# -- kstat -p text -------------------------------------------------------------

def read_kstat_text(text, module="cpu_info", name=None):
    """``{instance: {statistic: value}}`` for ``module`` (and kstats called
    ``name``, if given) from ``kstat -p`` output.

    Integers become ints; everything else (strings, the float ``crtime``)
    stays text.  Lines of other modules and malformed lines are ignored.
    """
    result = {}
    for line in text.splitlines():
        key, tab, value = line.partition("\t")
        if not tab:
            continue
        parts = key.split(":", 2)
        if len(parts) != 3 or parts[0] != module or not _INTEGER.match(parts[1]):
            continue
        kstat_name, _, statistic = parts[2].rpartition(":")
        if name is not None and kstat_name != name:
            continue
        value = value.strip()
        result.setdefault(int(parts[1]), {})[statistic] = (
            int(value) if _INTEGER.match(value) else value)
    return result


def run_kstat_command(runner=subprocess.run, selector="cpu_info:::", name=None):
    """``{instance: {statistic: value}}`` from ``kstat -p SELECTOR`` (its
    module is the selector's first field; kstats called ``name`` only, if
    given); OSError on failure."""
    command = "kstat -p %s" % selector
    try:
        done = runner(["kstat", "-p", selector], capture_output=True, text=True,
                      timeout=30, check=False)
    except subprocess.TimeoutExpired:
        raise OSError(errno.ETIMEDOUT, "%s timed out" % command) from None
    if done.returncode != 0:
        raise OSError(errno.EIO, "%s failed: %s" % (command, done.stderr.strip()))
    return read_kstat_text(done.stdout, module=selector.split(":", 1)[0], name=name)


# -- libkstat ----------------------------------------------------------------

class Kstat(ctypes.Structure):
    """kstat_t (usr/src/uts/common/sys/kstat.h); 184 bytes on LP64."""


Kstat._fields_ = [
    ("ks_crtime", ctypes.c_int64),
    ("ks_next", ctypes.POINTER(Kstat)),
    ("ks_kid", ctypes.c_int),
    ("ks_module", ctypes.c_char * KSTAT_STRLEN),
    ("ks_resv", ctypes.c_ubyte),
    ("ks_instance", ctypes.c_int),
    ("ks_name", ctypes.c_char * KSTAT_STRLEN),
    ("ks_type", ctypes.c_ubyte),
    ("ks_class", ctypes.c_char * KSTAT_STRLEN),
    ("ks_flags", ctypes.c_ubyte),
    ("ks_data", ctypes.c_void_p),
    ("ks_ndata", ctypes.c_uint),
    ("ks_data_size", ctypes.c_size_t),
    ("ks_snaptime", ctypes.c_int64),
    ("ks_update", ctypes.c_void_p),
    ("ks_private", ctypes.c_void_p),
    ("ks_snapshot", ctypes.c_void_p),
    ("ks_lock", ctypes.c_void_p),
]


class KstatCtl(ctypes.Structure):
    """kstat_ctl_t (usr/src/lib/libkstat/kstat.h)."""

    _fields_ = [
        ("kc_chain_id", ctypes.c_int),
        ("kc_chain", ctypes.POINTER(Kstat)),
        ("kc_kd", ctypes.c_int),
    ]


def load_libkstat():
    """libkstat.so.1 with argument and result types set; OSError if absent."""
    lib = ctypes.CDLL("libkstat.so.1", use_errno=True)
    lib.kstat_open.argtypes = []
    lib.kstat_open.restype = ctypes.POINTER(KstatCtl)
    lib.kstat_close.argtypes = [ctypes.POINTER(KstatCtl)]
    lib.kstat_close.restype = ctypes.c_int
    lib.kstat_read.argtypes = [ctypes.POINTER(KstatCtl), ctypes.POINTER(Kstat),
                               ctypes.c_void_p]
    lib.kstat_read.restype = ctypes.c_int
    lib.kstat_data_lookup.argtypes = [ctypes.POINTER(Kstat), ctypes.c_char_p]
    lib.kstat_data_lookup.restype = ctypes.c_void_p
    return lib


def named_value(address):
    """Value of the kstat_named_t at ``address`` (None for float types)."""
    data_type = ctypes.c_ubyte.from_address(address + _NAMED_TYPE_OFFSET).value
    value_at = address + _NAMED_VALUE_OFFSET
    if data_type == KSTAT_DATA_CHAR:
        return ctypes.string_at(value_at, 16).split(b"\0", 1)[0].decode("ascii", "replace")
    if data_type == KSTAT_DATA_INT32:
        return ctypes.c_int32.from_address(value_at).value
    if data_type == KSTAT_DATA_UINT32:
        return ctypes.c_uint32.from_address(value_at).value
    if data_type == KSTAT_DATA_INT64:
        return ctypes.c_int64.from_address(value_at).value
    if data_type == KSTAT_DATA_UINT64:
        return ctypes.c_uint64.from_address(value_at).value
    if data_type == KSTAT_DATA_STRING:
        pointer = ctypes.c_void_p.from_address(value_at).value
        return ctypes.string_at(pointer).decode("utf-8", "replace") if pointer else ""
    return None


class LibKstat:
    """Reads named kstats of one module through libkstat (``lib`` injectable)."""

    def __init__(self, lib=None):
        self.lib = lib if lib is not None else load_libkstat()

    def read(self, module=b"cpu_info", fields=CPU_INFO_FIELDS, name=None):
        """``{instance: {field: value}}`` of every named kstat of ``module``
        (only those called ``name``, if given)."""
        control = self.lib.kstat_open()
        if not control:
            code = ctypes.get_errno() or errno.EIO
            raise OSError(code, "kstat_open failed")
        try:
            return self._walk(control, module, fields, name)
        finally:
            self.lib.kstat_close(control)

    def creation_times(self, module, name):
        """``{instance: ks_crtime}`` (hrtime ns) of the kstats ``module``:*:``name``,
        from the chain's headers alone."""
        control = self.lib.kstat_open()
        if not control:
            code = ctypes.get_errno() or errno.EIO
            raise OSError(code, "kstat_open failed")
        try:
            result = {}
            entry = control.contents.kc_chain
            while entry:
                header = entry.contents
                if header.ks_module == module and header.ks_name == name:
                    result[header.ks_instance] = header.ks_crtime
                entry = header.ks_next
            return result
        finally:
            self.lib.kstat_close(control)

    def _walk(self, control, module, fields, name):
        result = {}
        entry = control.contents.kc_chain
        while entry:
            header = entry.contents
            if (header.ks_module == module and header.ks_type == KSTAT_TYPE_NAMED
                    and (name is None or header.ks_name == name)):
                values = self._read_named(control, entry, fields)
                if values is not None:
                    result[header.ks_instance] = values
            entry = header.ks_next
        return result

    def _read_named(self, control, entry, fields):
        if self.lib.kstat_read(control, entry, None) == -1:
            return None         # e.g. ENXIO: the CPU is still initialising
        values = {}
        for name in fields:
            address = self.lib.kstat_data_lookup(entry, name.encode("ascii"))
            if address:
                values[name] = named_value(address)
        return values


def read_system_cpu_info():
    """cpu_info of every CPU of the running system: libkstat, else ``kstat -p``."""
    return _read_system("cpu_info", CPU_INFO_FIELDS)


def read_system_pg():
    """``{pg id: {relationship, cpus, ncpus}}`` of the running system's
    processor groups (``pg_hw_perf`` kstats): libkstat, else ``kstat -p``."""
    return _read_system("pg_hw_perf", PG_FIELDS)


def _read_system(module, fields):
    try:
        reader = LibKstat()
    except (OSError, AttributeError):
        return run_kstat_command(selector="%s:::" % module)
    return reader.read(module=module.encode("ascii"), fields=fields)


#: ``cpu:<id>:sys`` fields of per-CPU time (usr/src/uts/common/os/cpu.c,
#: ``cpu_sys_stats_ks_data_template``): user, kernel and idle nanoseconds
#: partition the CPU's time; ``cpu_nsec_intr`` overlaps them: the time an
#: interrupt took is taken out of the state it interrupted (user, idle) and
#: added to kernel time (``get_cpu_mstate``, usr/src/uts/i86pc/os/machdep.c),
#: so ``cpu_nsec_kernel`` already holds it and it is not added.
#: ``pswitch``: context switches on the CPU (``swtch``,
#: usr/src/uts/common/disp/disp.c, adds one for every thread it switches
#: from), for Backend.cpu_switches.
CPU_SYS_FIELDS = ("cpu_nsec_idle", "cpu_nsec_user", "cpu_nsec_kernel", "pswitch")


def read_system_cpu_sys():
    """``{cpuid: {CPU_SYS_FIELDS}}`` of the running system's ``cpu:*:sys``
    kstats: libkstat, else ``kstat -p``."""
    try:
        reader = LibKstat()
    except (OSError, AttributeError):
        return run_kstat_command(selector="cpu:::sys")
    return reader.read(module=b"cpu", fields=CPU_SYS_FIELDS, name=b"sys")


def cpu_times_from_sys(stats):
    """Backend.cpu_times from ``cpu:*:sys`` stats: busy = user + kernel,
    total = busy + idle (ns).  A CPU missing a field is left out."""
    times = {}
    for cpu, fields in stats.items():
        try:
            busy = int(fields["cpu_nsec_user"]) + int(fields["cpu_nsec_kernel"])
            times[cpu] = (busy, busy + int(fields["cpu_nsec_idle"]))
        except (KeyError, ValueError, TypeError):
            continue
    return times


def switches_from_sys(stats, cpus):
    """Backend.cpu_switches from ``cpu:*:sys`` stats: ``pswitch`` summed
    over ``cpus``; None if a CPU of them has none (off-line: its kstat
    is gone)."""
    total = 0
    for cpu in cpus:
        value = stats.get(cpu, {}).get("pswitch")
        if not isinstance(value, int):
            return None
        total += value
    return total


def read_system_pset_created():
    """``{processor set id: its creation time (hrtime ns)}`` of the running
    system.  Each set gets a ``unix:<id>:pset`` kstat when it is created
    (``cpupart_kstat_create`` from ``cpupart_create``, usr/src/uts/common/
    disp/cpupart.c), deleted with the set, and ``kstat_create`` stamps it
    with ``ks_crtime = gethrtime()`` (usr/src/uts/common/os/kstat_fr.c): a
    set id reused for a new set comes with another creation time.
    libkstat, else ``kstat -p``; OSError if neither answers."""
    try:
        reader = LibKstat()
    except (OSError, AttributeError):
        return pset_created_from_text(
            run_kstat_command(selector="unix::pset:crtime", name="pset"))
    return reader.creation_times(b"unix", b"pset")


def pset_created_from_text(values):
    """``read_system_pset_created`` from ``kstat -p`` values: ``crtime`` is
    printed as seconds with nine decimals, read back exactly in ns."""
    created = {}
    for instance, fields in values.items():
        seconds, _, fraction = str(fields.get("crtime", "")).partition(".")
        if seconds.isdigit() and (fraction.isdigit() or not fraction):
            created[instance] = int(seconds) * 1_000_000_000 + int((fraction + "0" * 9)[:9])
    return created


def read_boot_time():
    """Seconds since the epoch at which the running system booted: the
    ``unix:0:system_misc:boot_time`` kstat (usr/src/uts/common/os/kstat_fr.c);
    OSError if it cannot be read."""
    try:
        reader = LibKstat()
    except (OSError, AttributeError):
        values = run_kstat_command(selector="unix:0:system_misc:boot_time")
    else:
        values = reader.read(module=b"unix", fields=("boot_time",), name=b"system_misc")
    boot_time = values.get(0, {}).get("boot_time")
    if not isinstance(boot_time, int):
        raise OSError(errno.ENOENT, "no unix:0:system_misc:boot_time kstat")
    return boot_time
