"""Following the machine while balancing (balance/machine.py): CPUs taken
off-line and back, on a scripted backend whose "kernel" resets the masks
of threads bound to a CPU that goes off-line, as Linux does."""

import os
import signal

import pytest

from conftest import thread_masks
from test_capacity import linux_root, split as bound_split
from test_controller_loads import MS, PID, ScriptedBackend
from test_other_work import bound_across
from test_reliability import finish, procs, spawner, state, wait_until  # noqa: F401
from tumbler.balance.controller import Controller
from tumbler.balance.domains import DomainChoice
from tumbler.engine.policy import make_policy
from tumbler.platform.base import Binder

BOTH = frozenset({0, 1})


@pytest.fixture
def every_round(monkeypatch):
    """Scripted rounds take no time: the on-line CPUs read at every one."""
    from tumbler.balance import machine
    monkeypatch.setattr(machine, "CHECK_INTERVAL_S", 0.0)


class HotplugBackend(ScriptedBackend):
    """Threads with masks, and CPUs that go off-line and back."""

    def __init__(self):
        super().__init__()
        self.online = BOTH
        self.masks = {}                 # tid -> mask, BOTH until set

    def online_cpus(self):
        return self.online

    def allowed_cpus(self, pid, tid):
        return self.masks.get(tid, BOTH)

    def offline(self, cpu):
        """CPU ``cpu`` goes off-line: a thread with no on-line CPU left in
        its mask gets its cpuset's CPUs (select_fallback_rq)."""
        self.online = self.online - {cpu}
        for tid, mask in self.masks.items():
            if not mask & self.online:
                self.masks[tid] = BOTH

    def back_online(self, cpu):
        self.online = self.online | {cpu}


class MaskBinder(Binder):
    kind = "affinity"
    binds_masks = True

    def __init__(self, backend):
        self.backend = backend
        self.bound_offline = []         # (tid, mask) bound with an off-line CPU in it

    def setup(self, domains):
        pass

    def save(self, pid, tid):
        return {"cpus": sorted(self.backend.allowed_cpus(pid, tid))}

    def bind(self, pid, tid, domain_index, cpus):
        if cpus - self.backend.online:
            self.bound_offline.append((tid, cpus))
        self.backend.masks[tid] = frozenset(cpus)

    def restore(self, pid, tid, saved):
        self.backend.masks[tid] = frozenset(saved["cpus"])


def busy_rounds(backend, controller, n, tids):
    for _ in range(n):
        backend.now += 100 * MS
        for tid in tids:
            backend.run(tid, 100)
        controller.round()


def hotplug_run():
    backend = HotplugBackend()
    tids = (101, 102, 103, 104)
    for tid in tids:
        backend.run(tid, 0)
    warnings = []
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, MaskBinder(backend), make_policy("tumbler"), choice,
                            warn=warnings.append)
    controller.add_target(PID)
    return backend, controller, tids, warnings


def split(backend, tids):
    """The threads' masks, as sorted lists of CPUs, in order."""
    return sorted(sorted(backend.masks.get(tid, BOTH)) for tid in tids)


def test_a_cpu_off_line_and_back_is_followed_and_its_threads_stay_tumblers(every_round):
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    assert split(backend, tids) == [[0], [0], [1], [1]]
    # CPU 1 off-line: the kernel widens the masks of the threads bound to it.
    backend.offline(1)
    busy_rounds(backend, controller, 3, tids)
    assert [d.cpus for d in controller.domains] == [frozenset({0})]
    assert controller.choice.single             # all the program may use now
    # Handed back (their own masks again), none taken for an admin's change.
    assert split(backend, tids) == [[0, 1]] * 4
    assert warnings == ["CPU 1 off-line: domains 0"], warnings
    assert not any(t.unmovable for t in controller.threads.values())
    # CPU 1 back: two domains again, the threads grouped 2 + 2 once more.
    backend.back_online(1)
    busy_rounds(backend, controller, 3, tids)
    assert [d.cpus for d in controller.domains] == [frozenset({0}), frozenset({1})]
    assert split(backend, tids) == [[0], [0], [1], [1]]
    assert warnings[1:] == ["CPU 1 on-line: domains 0 / 1"], warnings
    assert controller.binder.bound_offline == []
    # And every thread is restored to its own mask at the end.
    controller.restore_all()
    assert split(backend, tids) == [[0, 1]] * 4


def test_a_reset_seen_before_the_round_that_notices_the_cpu_is_the_kernels(every_round):
    """The next bind checks the mask before the round sees the on-line
    CPUs change: the thread is still tumbler's, and placed on-line."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_one = [tid for tid in tids if backend.masks[tid] == {1}]
    backend.offline(1)
    thread = controller.threads[(PID, on_one[0])]
    assert controller._still_ours(thread)
    assert thread.bound_mask is None and not thread.unmovable
    assert not any("someone else" in w for w in warnings)


def test_an_admins_change_on_cpus_that_stayed_on_line_is_still_left_alone(every_round):
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_zero = [tid for tid in tids if backend.masks[tid] == {0}]
    backend.masks[on_zero[0]] = BOTH            # an admin's taskset
    thread = controller.threads[(PID, on_zero[0])]
    assert not controller._still_ours(thread)   # what the next bind or hand-back asks
    assert thread.unmovable
    assert any("changed to 0-1 by someone else" in w for w in warnings), warnings
    # Even once a CPU goes off-line later: it stays the admin's.
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    controller.restore_all()
    assert thread.unmovable and backend.masks[on_zero[0]] == BOTH


# -- a real CPU taken off-line and back -------------------------------------------------


def status_masks(pid):
    """{tid: the mask set on it} as /proc/PID/task/TID/status shows it
    (Cpus_allowed_list): sched_getaffinity(2) leaves off-line CPUs out."""
    from tumbler.cpulist import parse_cpulist
    masks = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        masks[int(tid)] = parse_cpulist(line.split(":", 1)[1].strip())
        except OSError:
            pass
    return masks


def _online_file(cpu):
    return "/sys/devices/system/cpu/cpu%d/online" % cpu


def _can_take_off_line(cpu):
    if not os.access(_online_file(cpu), os.W_OK):
        pytest.skip("CPU %d cannot be taken off-line here (no %s)" % (cpu, _online_file(cpu)))


def _set_online(cpu, on):
    with open(_online_file(cpu), "w") as f:
        f.write("1" if on else "0")


@linux_root
def test_a_real_cpu_off_line_and_back_is_followed(spawner, procs, state, tmp_path, two_cpus):
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    target, tumbler = bound_across(procs, spawner, state, two_cpus, 4)
    try:
        _set_online(cpu_b, False)
        # Handed back: the domain of CPU b is gone while it is off-line.
        wait_until(lambda: all(m == both for m in status_masks(target.pid).values()),
                   timeout=20, what="every thread handed back while CPU %d is off-line" % cpu_b)
    finally:
        _set_online(cpu_b, True)
    wait_until(lambda: bound_split(target.pid, cpu_a, cpu_b) == (2, 2), timeout=20,
               what="two spinners bound to each CPU again once it is back")
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert "CPU %d off-line" % cpu_b in stderr and "CPU %d on-line" % cpu_b in stderr, stderr
    assert "someone else" not in stderr, stderr
    assert all(m == both for m in thread_masks(target.pid).values())


@linux_root
def test_the_service_says_a_real_cpu_change_once(spawner, procs, state, tmp_path, two_cpus):
    from test_service import Service, config
    from test_service import spinners as tagged_spinners
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    tag = "hotplug-%d" % os.getpid()
    programs = [tagged_spinners(procs, spawner, both, 2, tag) for _ in range(2)]
    service = Service(procs, state, tmp_path, config(
        '  - name: hot\n    match: {cmdline: "%s"}\n    domains: "%d/%d"\n' % (tag, cpu_a, cpu_b)))
    wait_until(lambda: all(bound_split(p.pid, cpu_a, cpu_b) == (1, 1) for p in programs),
               timeout=20, what="each program's spinners bound one to each CPU")
    try:
        _set_online(cpu_b, False)
        wait_until(lambda: "CPU %d off-line: 2 programs re-planned" % cpu_b in service.log(),
                   timeout=20, what="the service to say the change once")
        wait_until(lambda: all(m == both for p in programs
                               for m in status_masks(p.pid).values()),
                   timeout=20, what="every thread handed back while CPU %d is off-line" % cpu_b)
    finally:
        _set_online(cpu_b, True)
    wait_until(lambda: all(bound_split(p.pid, cpu_a, cpu_b) == (1, 1) for p in programs),
               timeout=20, what="bound one to each CPU again once it is back")
    # (each program's controller and the service look at their own times)
    wait_until(lambda: "CPU %d on-line: 2 programs re-planned" % cpu_b in service.log(),
               timeout=20, what="the service to say the CPU is back")
    assert service.stop() == 0
    log = service.log()
    assert log.count("off-line") == 1 and log.count("on-line:") == 1, log
    assert "someone else" not in log, log
    assert all(m == both for p in programs for m in thread_masks(p.pid).values())
