"""Which illumos zone tumbler runs in, and what a non-global zone forbids.

A non-global zone can never hold some privileges, whatever its
configuration or the user: the zone brands list them as "prohibited"
(illumos-gate usr/src/lib/brand/ipkg/zone/config.xml, and the same list for
the other brands).  Two of them are what tumbler needs:

* ``sys_res_config`` -- creating, changing and destroying processor sets
  (``secpolicy_pset``), so ``--binder pset`` cannot work in a zone;
* ``dtrace_kernel`` -- reading other threads' kernel data in DTrace, as
  every probe script does (the ``sched`` provider itself is registered at
  the ``dtrace_user`` level: probes/README.md).

So "run as root" is the wrong advice there: root in a zone does not have
them either.  ``zone_name()`` says where we are; ``GLOBAL`` is the global
zone's name (zone id 0, ``GLOBAL_ZONEID`` in usr/src/uts/common/sys/zone.h).
"""

import ctypes
import subprocess
import sys

GLOBAL = "global"
_ZONENAME_MAX = 64


def zone_name():
    """Name of the zone this process runs in; None where that cannot be
    told (not illumos, or neither libc nor zonename(1) answers)."""
    if not sys.platform.startswith("sunos"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.1", use_errno=True)
        zone_id = libc.getzoneid()
        buffer = ctypes.create_string_buffer(_ZONENAME_MAX)
        if libc.getzonenamebyid(zone_id, buffer, _ZONENAME_MAX) >= 0:
            return buffer.value.decode("ascii", "replace")
    except (OSError, AttributeError):
        pass
    try:
        done = subprocess.run(["/usr/bin/zonename"], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def nonglobal_zone():
    """The zone's name if this is a non-global zone, else None."""
    name = zone_name()
    return name if name not in (None, GLOBAL) else None


def prohibited(privilege, zone, needed_for):
    """One line: ``privilege`` (e.g. "sys_res_config") cannot be had in ``zone``."""
    return ("%s needs the %s privilege, which a non-global zone (here: %s) can never "
            "have, not even as root; run tumbler in the global zone"
            % (needed_for, privilege, zone))
