"""Sleep between intervals, waking at once for signals and child exits.

What tumbler's own process needs, beside priority.py (its nice value)
and limits.py (its open-files limit): the loops of ``-p``, ``exec``,
``probe`` and the service sleep here, and a stop signal ends each cleanly.

A self-pipe registered with ``signal.set_wakeup_fd`` turns every signal
into a byte, so the sleep (``poll``) ends as soon as a stop signal or
SIGCHLD arrives instead of finishing a sleep of up to 800 ms.  The handlers
only record the signal; the loop acts on it between steps, so no state is
ever changed from inside a handler.

The stop signals are every signal whose default action would end tumbler
and that a handler can serve: an uncaught one would end it with threads
still bound.  Not among them: SIGKILL and SIGSTOP (cannot be caught),
SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP and SIGSYS (a fault of tumbler's
own: a handler that returns would run the faulting instruction again --
``tumbler restore`` is for crashes), and SIGPIPE and SIGXFSZ, which Python
ignores so that writes fail with an error instead (the convention).  A
signal ignored when tumbler starts (``nohup``) is left ignored.
"""

import os
# The C module under ``signal``: the same functions and numbers, without
# the enum wrappers whose import (enum, functools, collections) costs 4 ms
# here -- ``tumbler exec`` sets its handlers before it starts its command.
import _signal as signal
import time

from .priority import woke


def _stop_signals():
    names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
             "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPOLL", "SIGPWR", "SIGSTKFLT", "SIGXCPU",
             "SIGABRT", "SIGEMT", "SIGLOST", "SIGXRES")
    found = {getattr(signal, name) for name in names if hasattr(signal, name)}
    if hasattr(signal, "SIGRTMIN"):         # real-time signals end a process too
        found.update(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
    return tuple(sorted(found))


#: Signals that end a run (see the module doc), in number order.
STOP_SIGNALS = _stop_signals()
#: Of them, the ones a run always takes over; the others only while they
#: would end tumbler (their disposition is the default): a handler some
#: other part of tumbler set for one of them stands.
ALWAYS_STOP = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class SignalWaiter:
    """Records signals and lets the main loop sleep until one arrives."""

    def __init__(self, signals=STOP_SIGNALS, watch_children=False):
        self.pending = []
        self.watches_children = watch_children     # SIGCHLD is recorded too
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll = None               # made at the first sleep (_poller)
        self._watched = set()
        self._old_wakeup = signal.set_wakeup_fd(self._write_fd)
        self._old_handlers = {}
        # A signal ignored when tumbler started stays ignored, for tumbler
        # and for exec's command (which inherits that): ``nohup tumbler
        # exec`` and a script's ``tumbler exec ... &`` (SIGINT ignored) go
        # on as their commands would alone.
        wanted = []
        for signum in signals:
            handler = signal.getsignal(signum)
            if handler != signal.SIG_IGN and (signum in ALWAYS_STOP or handler == signal.SIG_DFL):
                wanted.append(signum)
        wanted += [signal.SIGCHLD] if watch_children else []
        for signum in wanted:
            self._old_handlers[signum] = signal.signal(signum, self._record)

    def _record(self, signum, frame):
        self.pending.append(signum)

    def take(self):
        """Return and clear the signals received so far, oldest first."""
        if not self.pending:
            return ()
        taken, self.pending = self.pending, []
        return taken

    def _poller(self):
        """One poll object for every sleep: the loop sleeps once per
        interval, and select() would build its fd lists each time.  Made
        on first use: ``tumbler exec`` makes its waiter before it starts
        its command, and ``select`` is not needed until then."""
        if self._poll is None:
            import select
            self._poll = select.poll()
            self._poll.register(self._read_fd, select.POLLIN)
        return self._poll

    def watch(self, fd):
        """Also end a sleep when ``fd`` is readable (the service's control
        socket)."""
        import select
        self._poller().register(fd, select.POLLIN)
        self._watched.add(fd)

    def sleep(self, seconds):
        """Sleep up to ``seconds``; return early if a signal arrived or a
        watched fd is readable.  Returns the watched fds that are.  How
        late the wake-up came is told to platform/priority.py (``woke``):
        an overloaded machine raises tumbler's priority."""
        if self.pending:
            return ()
        due = time.monotonic() + max(seconds, 0.0)
        if self._watched:
            events = self._poller().poll(max(seconds, 0.0) * 1000.0)
        elif seconds > 0:
            events = self._poller().poll(seconds * 1000.0)
        else:
            events = ()
        woke(time.monotonic() - due if not events else 0.0)
        if not events:
            return ()
        ready = [fd for fd, _ in events if fd in self._watched]
        if len(ready) < len(events):
            self._drain()
        return ready

    def _drain(self):
        try:
            while os.read(self._read_fd, 512):
                pass
        except BlockingIOError:
            pass

    def close(self):
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._old_wakeup)
        os.close(self._read_fd)
        os.close(self._write_fd)
