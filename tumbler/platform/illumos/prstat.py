"""prstat -mL percentages from two samples of an LWP's microstates (the
``micro`` of the illumos backend's ThreadTimes)."""

from ..base import STAT_COLUMNS

#: Columns of prstat -mL, in its order.
PRSTAT_COLUMNS = STAT_COLUMNS["illumos"]


def microstate_percent(prev, cur):
    """prstat -mL percentages of one LWP between two ThreadTimes.

    As usr/src/cmd/prstat/prstat.c (``lwp_update``): each column is
    delta(field) / delta(pr_rtime) * 100; with no previous sample (or a
    previous one of another LWP that reused the id) it is the total since
    the LWP was created over its pr_rtime.  Columns: ``PRSTAT_COLUMNS``.
    Empty if ``cur`` has no microstates (not an illumos sample); all zero
    if no time elapsed.
    """
    if "rtime" not in cur.micro:
        return {}
    now = _microstates(cur)
    if (prev is not None and prev.tid == cur.tid and prev.start == cur.start
            and "rtime" in prev.micro):
        before = _microstates(prev)
        period = cur.micro["rtime"] - prev.micro["rtime"]
    else:
        before = dict.fromkeys(PRSTAT_COLUMNS, 0)
        period = cur.micro["rtime"]
    if period <= 0:
        return dict.fromkeys(PRSTAT_COLUMNS, 0.0)
    return {column: (now[column] - before[column]) * 100.0 / period
            for column in PRSTAT_COLUMNS}


def _microstates(times):
    micro = times.micro
    return {"usr": times.usr_ns or 0, "sys": times.sys_ns or 0, "trp": micro["trp"],
            "tfl": micro["tfl"], "dfl": micro["dfl"], "lck": micro["lck"],
            "slp": micro["slp"], "lat": times.lat_ns or 0}
