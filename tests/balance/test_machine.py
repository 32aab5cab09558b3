"""Following the machine while balancing (balance/machine.py): CPUs taken
off-line and back, cgroup cpusets narrowed and widened -- on a scripted
backend whose "kernel" resets masks as Linux does, on real CPUs and a real
cgroup v1 cpuset as root -- and the topology read again, on fixture trees."""

import os
import signal
import time

import pytest

from support.helpers import REPO, assert_no_traceback, thread_masks, thread_names, tumbler_cmd
from support.capacity import linux_root, split as bound_split
from support.scripted import MS, PID, ScriptedBackend
from support.capacity import bound_across
from support.processes import env_for, finish, wait_until
from support.sharing import spinners
from tumbler.balance.controller import Controller
from tumbler.balance.domains import DomainChoice
from tumbler.balance.machine import MachineWatch
from tumbler.engine.policy import make_policy
from tumbler.platform.base import Binder, PlatformError, Unmovable

BOTH = frozenset({0, 1})


@pytest.fixture
def every_round(monkeypatch):
    """Scripted rounds take no time: the on-line CPUs read at every one."""
    from tumbler.balance import machine
    monkeypatch.setattr(machine, "CHECK_INTERVAL_S", 0.0)


class HotplugBackend(ScriptedBackend):
    """Threads with masks, CPUs that go off-line and back, and a cgroup
    cpuset that narrows and widens.  ``keeps_requested``: the kernel keeps
    the mask a thread asked for (Linux 6.2 and later), and a cpuset change
    gives it that mask within the new CPUs, else the new CPUs; without,
    every thread in the cpuset gets its new CPUs (before 6.2)."""

    def __init__(self, cpus=BOTH, keeps_requested=True):
        super().__init__()
        self.online = self.cpuset = self.active = frozenset(cpus)
        self.keeps_requested = self.keeps_asked_mask = keeps_requested
        self.masks = {}                 # tid -> mask, the cpuset's CPUs until set
        self.requested = {}             # tid -> the mask sched_setaffinity asked for

    def online_cpus(self):
        return self.online

    def cpuset_cpus(self, pid):
        return "cgroup /app", self.cpuset

    def allowed_cpus(self, pid, tid):
        """sched_getaffinity: the mask within the CPUs active now."""
        return self.mask_as_set(pid, tid) & self.active

    def mask_as_set(self, pid, tid):
        return self.masks.get(tid, self.cpuset)

    def inactive_cpus(self):
        return self.online - self.active

    def set_affinity(self, tid, cpus):
        """sched_setaffinity: the mask asked for within the cpuset; EINVAL
        when that leaves no active CPU."""
        mask = frozenset(cpus) & self.cpuset & self.active
        if not mask:
            raise Unmovable(tid, "the kernel refused the CPU set (EINVAL)")
        self.requested[tid] = frozenset(cpus)
        # Before 6.2 the mask is cut to the CPUs on-line now, for good.
        self.masks[tid] = frozenset(cpus) & self.cpuset & (
            frozenset(cpus) if self.keeps_requested else self.online)

    def set_cpuset(self, cpus):
        """The admin (or a container runtime) writes the cpuset's CPUs."""
        self.cpuset = frozenset(cpus)
        for tid in self.threads:
            asked = self.requested.get(tid)
            keep = self.keeps_requested and asked is not None and asked & self.cpuset
            self.masks[tid] = asked & self.cpuset if keep else self.cpuset

    def offline(self, cpu):
        """CPU ``cpu`` goes off-line: a thread with no on-line CPU left in
        its mask gets its cpuset's CPUs (select_fallback_rq)."""
        self.online = self.active = self.online - {cpu}
        for tid, mask in self.masks.items():
            if not mask & self.online:
                self.masks[tid] = self.cpuset

    def back_online(self, cpu, active=True):
        """CPU ``cpu`` on-line again; ``active=False``: not yet among the
        active CPUs (the scheduler's), as for a moment of each hotplug."""
        self.online = self.online | {cpu}
        self.active = self.active | {cpu} if active else self.active

    def deactivate(self, cpu, push=False):
        """The first step of taking CPU ``cpu`` off-line: no longer active,
        still on-line (sched_cpu_deactivate, before the CPU is torn down).
        ``push``: the scheduler already pushes its threads away (balance
        push): one with no active CPU left gets its cpuset's CPUs, all of
        them (select_fallback_rq), while the on-line CPUs and the cpuset
        still show ``cpu``."""
        self.active = self.active - {cpu}
        for tid, mask in self.masks.items():
            if push and not mask & self.active:
                self.masks[tid] = self.cpuset


class MaskBinder(Binder):
    kind = "affinity"
    binds_masks = True

    def __init__(self, backend):
        self.backend = backend
        self.bound_offline = []         # (tid, mask) bound with an off-line CPU in it
        self.bound_outside = []         # (tid, mask) bound with a CPU outside the cpuset

    def setup(self, domains):
        pass

    def save(self, pid, tid):
        return {"cpus": sorted(self.backend.allowed_cpus(pid, tid))}

    def bind(self, pid, tid, domain_index, cpus):
        if cpus - self.backend.online:
            self.bound_offline.append((tid, cpus))
        if cpus - self.backend.cpuset:
            self.bound_outside.append((tid, cpus))
        self.backend.set_affinity(tid, cpus)

    def restore(self, pid, tid, saved):
        self.backend.set_affinity(tid, saved["cpus"])


def busy_rounds(backend, controller, n, tids):
    for _ in range(n):
        backend.now += 100 * MS
        for tid in tids:
            backend.run(tid, 100)
        controller.round()


def hotplug_run(backend=None):
    """4 threads on --domains 0/1 (a scripted kernel: HotplugBackend)."""
    backend = backend or HotplugBackend()
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
    """The threads' masks (as set, not within the active CPUs), as sorted
    lists of CPUs, in order."""
    return sorted(sorted(backend.mask_as_set(PID, tid)) for tid in tids)


def assert_grouped_again_then_restored(backend, controller, tids):
    """Two 1-CPU domains again: the four busy threads grouped 2 + 2 within
    two full rounds; then every thread restored to its own mask (both
    CPUs) by ``restore_all``."""
    busy_rounds(backend, controller, 2, tids)
    assert [d.cpus for d in controller.domains] == [frozenset({0}), frozenset({1})]
    assert split(backend, tids) == [[0], [0], [1], [1]]
    controller.restore_all()
    assert split(backend, tids) == [[0, 1]] * 4


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
    assert_grouped_again_then_restored(backend, controller, tids)
    assert warnings[1:] == ["CPU 1 on-line: domains 0 / 1"], warnings
    assert controller.binder.bound_offline == []


def test_a_reset_seen_before_the_round_that_notices_the_cpu_is_the_kernels(every_round):
    """The next bind checks the mask before the round sees the on-line
    CPUs change: the thread is still tumbler's, and placed on-line."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_one = [tid for tid in tids if backend.masks[tid] == {1}]
    backend.offline(1)
    thread = controller.threads[(PID, on_one[0])]
    assert controller.placer.still_ours(thread)
    assert thread.bound_mask is None and not thread.unmovable
    assert not any("someone else" in w for w in warnings)


@pytest.mark.parametrize("push", [False, True])
def test_a_cpu_leaving_the_active_cpus_before_it_goes_off_line_is_no_ones_change(
        every_round, push):
    """sched_getaffinity(2) shows a mask within the active CPUs, and a CPU
    leaves them before it goes off-line: for that moment a thread bound to
    it reads as bound elsewhere (here to no CPU), or the kernel has
    already moved it (``push``: its mask now its cpuset's CPUs) while the
    on-line CPUs and the cpuset still show the CPU.  Either way the thread
    is still tumbler's, placed again and restored (a Linux 6.1 guest test
    found threads handed over, never restored, so)."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_one = [tid for tid in tids if backend.masks[tid] == {1}]
    backend.deactivate(1, push)
    thread = controller.threads[(PID, on_one[0])]
    assert controller.placer.still_ours(thread)
    assert thread.bound_mask == (None if push else {1}) and not thread.unmovable
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    assert split(backend, tids) == [[0, 1]] * 4
    backend.back_online(1)
    assert_grouped_again_then_restored(backend, controller, tids)
    assert not [w for w in warnings if "someone else" in w], warnings


def test_a_bind_refused_for_a_cpu_leaving_the_active_ones_leaves_the_thread_tumblers(
        every_round):
    """The kernel refuses a mask of no active CPU (EINVAL) while the CPU is
    still on-line and in the cpuset: the machine changed under the bind,
    the thread is not unmovable (the 6.1 guest test found one so)."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    thread = next(t for t in controller.threads.values() if t.domain == 0)
    backend.deactivate(1)
    assert controller.placer.apply([(thread, 1)]) == []
    assert not thread.unmovable and thread.domain == 0
    assert not [w for w in warnings if "cannot be moved" in w], warnings
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    backend.back_online(1)
    assert_grouped_again_then_restored(backend, controller, tids)


def test_a_cpu_on_line_but_not_yet_active_is_no_ones_change(every_round):
    """Back on-line, a CPU joins the active CPUs a moment later: a thread
    handed back with both CPUs reads CPU 0 alone meanwhile.  Bound again
    then, it is still tumbler's."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    backend.back_online(1, active=False)
    busy_rounds(backend, controller, 1, tids)
    assert not [w for w in warnings if "someone else" in w], warnings
    backend.back_online(1)
    assert_grouped_again_then_restored(backend, controller, tids)
    assert not [w for w in warnings if "someone else" in w], warnings


def test_an_admins_change_on_cpus_that_stayed_on_line_is_still_left_alone(every_round):
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_zero = [tid for tid in tids if backend.masks[tid] == {0}]
    backend.masks[on_zero[0]] = BOTH            # an admin's taskset
    thread = controller.threads[(PID, on_zero[0])]
    assert not controller.placer.still_ours(thread)   # what the next bind or hand-back asks
    assert thread.unmovable
    assert any("changed to 0-1 by someone else" in w for w in warnings), warnings
    # Even once a CPU goes off-line later: it stays the admin's.
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    controller.restore_all()
    assert thread.unmovable and backend.masks[on_zero[0]] == BOTH


def test_a_mask_the_kernel_cut_while_a_cpu_was_off_line_stays_tumblers(every_round):
    """Linux before 6.2 cuts a mask set while some of its CPUs are off-line
    to the CPUs on-line then, for good: the threads handed back (both CPUs)
    while CPU 1 is off-line still show CPU 0 alone once it returns -- the
    kernel's doing, not an admin's.  They are grouped again and get both
    CPUs back at the end (a Linux 6.1 guest test found this: docs/guests.md)."""
    backend, controller, tids, warnings = hotplug_run(HotplugBackend(keeps_requested=False))
    busy_rounds(backend, controller, 3, tids)
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    assert split(backend, tids) == [[0]] * 4       # handed back, cut by the kernel
    backend.back_online(1)
    assert_grouped_again_then_restored(backend, controller, tids)
    assert not [w for w in warnings if "someone else" in w], warnings


def test_an_admins_taskset_while_the_threads_are_handed_back_is_left_alone(every_round):
    """CPU 1 off-line hands every thread back; an admin's taskset then is
    not overridden when the CPU returns and the others are bound again."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    backend.offline(1)
    busy_rounds(backend, controller, 2, tids)
    assert split(backend, tids) == [[0, 1]] * 4
    backend.set_affinity(tids[0], {0})          # the admin's taskset
    backend.back_online(1)
    busy_rounds(backend, controller, 3, tids)
    thread = controller.threads[(PID, tids[0])]
    assert thread.unmovable and backend.masks[tids[0]] == {0}
    assert [w for w in warnings if "someone else" in w] == [
        "thread %d (t%d): its affinity was changed to 0 by someone else; tumbler leaves "
        "it alone from now on" % (tids[0], tids[0])], warnings
    assert sorted(len(backend.masks[tid]) for tid in tids[1:]) == [1, 1, 1]
    controller.restore_all()
    assert backend.masks[tids[0]] == {0}
    assert split(backend, tids[1:]) == [[0, 1]] * 3


def test_an_admins_taskset_of_a_thread_the_kernel_moved_off_line_is_left_alone(every_round):
    """Three 1-CPU domains, CPU 2 off-line: the kernel gives the threads
    bound there their cpuset's CPUs; an admin who places one elsewhere
    before tumbler looks is not overridden."""
    backend = HotplugBackend({0, 1, 2})
    tids = (101, 102, 103)
    for tid in tids:
        backend.run(tid, 0)
    warnings = []
    choice = DomainChoice("explicit", tuple(frozenset({cpu}) for cpu in range(3)), "test")
    controller = Controller(backend, MaskBinder(backend), make_policy("tumbler"), choice,
                            warn=warnings.append)
    controller.add_target(PID)
    busy_rounds(backend, controller, 3, tids)
    on_two = next(tid for tid in tids if backend.masks[tid] == {2})
    backend.offline(2)
    assert backend.masks[on_two] == {0, 1, 2}               # the kernel's fallback
    backend.masks[on_two] = frozenset({1})                  # and then the admin's
    busy_rounds(backend, controller, 2, tids)
    thread = controller.threads[(PID, on_two)]
    assert thread.unmovable and backend.masks[on_two] == {1}
    assert [w for w in warnings if "someone else" in w] == [
        "thread %d (t%d): its affinity was changed to 1 by someone else; tumbler leaves "
        "it alone from now on" % (on_two, on_two)], warnings
    controller.restore_all()
    assert backend.masks[on_two] == {1}


# -- a cgroup cpuset narrowed and widened ------------------------------------------------

KERNELS = pytest.mark.parametrize("keeps_requested", [True, False],
                                  ids=["linux-6.2+", "before-6.2"])


@KERNELS
def test_a_cpuset_narrowed_and_widened_is_followed(every_round, keeps_requested):
    backend, controller, tids, warnings = hotplug_run(HotplugBackend(
        keeps_requested=keeps_requested))
    busy_rounds(backend, controller, 3, tids)
    assert split(backend, tids) == [[0], [0], [1], [1]]
    # Narrowed to CPU 0: the kernel moves the threads bound to CPU 1 there.
    backend.set_cpuset({0})
    busy_rounds(backend, controller, 3, tids)
    assert [d.cpus for d in controller.domains] == [frozenset({0})]
    assert controller.choice.single             # all the program may use now
    # Handed back (their own masks again, within the cpuset), none taken
    # for an admin's change.
    assert split(backend, tids) == [[0]] * 4
    assert warnings == ["cgroup /app: CPUs 0 (was 0-1): domains 0"], warnings
    assert not any(t.unmovable for t in controller.threads.values())
    # Widened again: two domains, the threads grouped 2 + 2 once more.
    backend.set_cpuset(BOTH)
    assert_grouped_again_then_restored(backend, controller, tids)
    assert warnings[1:] == ["cgroup /app: CPUs 0-1 (was 0): domains 0 / 1"], warnings
    assert controller.binder.bound_outside == []


def test_a_cpuset_narrowed_before_the_first_round_is_a_change(every_round):
    """Threads are placed when the target is added, before any round: its
    cpuset is noted then, not at the first look."""
    backend, controller, tids, warnings = hotplug_run()
    assert split(backend, tids) == [[0], [0], [1], [1]]
    backend.set_cpuset({0})
    busy_rounds(backend, controller, 2, tids)
    assert warnings == ["cgroup /app: CPUs 0 (was 0-1): domains 0"], warnings
    assert split(backend, tids) == [[0]] * 4


@KERNELS
def test_masks_the_kernel_reset_in_domains_that_stay_are_placed_again(every_round,
                                                                    keeps_requested):
    """A cpuset of CPUs 0-2 narrowed to 0-1 leaves --domains 0/1 as they
    were; before 6.2 the kernel still gave every thread 0-1: each is
    tumbler's, bound again at the next round."""
    backend, controller, tids, warnings = hotplug_run(HotplugBackend(
        {0, 1, 2}, keeps_requested=keeps_requested))
    busy_rounds(backend, controller, 3, tids)
    assert split(backend, tids) == [[0], [0], [1], [1]]
    backend.set_cpuset(BOTH)
    busy_rounds(backend, controller, 1, tids)
    assert warnings == ["cgroup /app: CPUs 0-1 (was 0-2): domains 0 / 1"], warnings
    busy_rounds(backend, controller, 1, tids)
    assert split(backend, tids) == [[0], [0], [1], [1]]
    assert not any(t.unmovable for t in controller.threads.values())
    controller.restore_all()
    assert split(backend, tids) == [[0, 1]] * 4


def test_an_admins_taskset_during_a_cpuset_change_is_still_left_alone(every_round):
    backend, controller, tids, warnings = hotplug_run(HotplugBackend(
        {0, 1, 2}, keeps_requested=False))
    busy_rounds(backend, controller, 3, tids)
    on_zero = [tid for tid in tids if backend.masks[tid] == {0}]
    backend.set_cpuset(BOTH)                    # every mask 0-1 (before 6.2)
    backend.masks[on_zero[0]] = frozenset({1})  # and an admin's taskset: not the kernel's
    busy_rounds(backend, controller, 2, tids)
    thread = controller.threads[(PID, on_zero[0])]
    assert thread.unmovable and backend.masks[on_zero[0]] == {1}
    assert [w for w in warnings if "someone else" in w] == [
        "thread %d (t%d): its affinity was changed to 1 by someone else; tumbler leaves "
        "it alone from now on" % (on_zero[0], on_zero[0])], warnings
    others = [tid for tid in tids if tid != on_zero[0]]
    assert sorted(len(backend.masks[tid]) for tid in others) == [1, 1, 1]
    controller.restore_all()
    assert backend.masks[on_zero[0]] == {1}


def test_a_bind_the_cpuset_refuses_before_the_round_sees_it_leaves_the_thread_tumblers(
        every_round):
    """The cpuset narrows between two looks and a bind to the CPU it took
    is refused (EINVAL): the thread is not given up for it."""
    backend, controller, tids, warnings = hotplug_run()
    busy_rounds(backend, controller, 3, tids)
    on_zero = [tid for tid in tids if backend.masks[tid] == {0}]
    backend.set_cpuset({0})
    thread = controller.threads[(PID, on_zero[0])]
    assert controller.placer.bind_all([(thread, 1, None)]) == []
    assert not thread.unmovable and not warnings
    busy_rounds(backend, controller, 2, tids)
    assert controller.choice.single and split(backend, tids) == [[0]] * 4
    assert controller.binder.bound_outside == [(on_zero[0], frozenset({1}))]   # refused


class CgroupsBackend(HotplugBackend):
    """Processes in cgroups of their own (the service's programs)."""

    def __init__(self, cgroups, cpus):
        super().__init__(cpus)
        self.cgroups = cgroups          # pid -> [cgroup, CPUs]

    def cpuset_cpus(self, pid):
        if self.cgroups[pid] is None:
            raise PlatformError("cannot read the cpuset of PID %d" % pid)
        where, cpus = self.cgroups[pid]
        return where, frozenset(cpus)


def test_a_cpuset_read_that_fails_once_loses_no_change(every_round):
    """A look that cannot read a program's cpuset keeps what the look
    before read: narrowed while unreadable, the change is said at the next
    look that reads it (stored as unknown, it was taken for a first sight
    and never said)."""
    from tumbler.balance.machine import MachineWatch
    backend = CgroupsBackend({1: ["cgroup /a", {0, 1}]}, {0, 1})
    watch = MachineWatch(backend)
    assert watch.look([1]) == []
    backend.cgroups[1] = None
    assert watch.look([1]) == []
    backend.cgroups[1] = ["cgroup /a", {0}]
    assert watch.look([1]) == [("cgroup /a: CPUs 0 (was 0-1)", frozenset({1}))]
    assert watch.look([1]) == []


def test_one_line_per_cpuset_change_with_the_programs_in_it(every_round):
    from tumbler.balance.machine import MachineWatch
    three = {0, 1, 2}
    backend = CgroupsBackend({1: ["cgroup /a", three], 2: ["cgroup /a", three],
                              3: ["cgroup /b\n", three]}, three)
    watch = MachineWatch(backend)
    assert watch.look([1, 2, 3]) == []
    backend.cgroups[1][1] = backend.cgroups[2][1] = {0}
    backend.cgroups[3][1] = {1, 2}
    assert watch.look([1, 2, 3]) == [
        ("cgroup /a: CPUs 0 (was 0-2)", frozenset({1, 2})),
        ("cgroup /b\\n: CPUs 1-2 (was 0-2)", frozenset({3}))]
    assert watch.settling == {1, 2, 3}
    # A CPU off-line leaves the cpusets too (the kernel's update on
    # hotplug): one change, the hotplug, said once.
    backend.online = frozenset({0, 1})
    backend.cgroups[3][1] = {1}
    assert watch.look([1, 2, 3]) == [("CPU 2 off-line", None)]
    assert watch.settling == {3}
    # ... also when the cpuset follows at the next look (an older kernel's
    # hotplug work, done a moment later).
    backend.online = frozenset({0, 1, 2})
    assert watch.look([1, 2, 3]) == [("CPU 2 on-line", None)]
    backend.cgroups[3][1] = {1, 2}
    assert watch.look([1, 2, 3]) == []
    assert watch.look([1, 2, 3]) == [] and watch.settling == frozenset()


def test_a_cpuset_catching_up_with_a_hotplug_a_look_later_is_followed(every_round):
    """Kernels that update cpusets on hotplug from a work queue: the
    on-line CPUs first, the cpuset at the next look."""
    from tumbler.balance.machine import MachineWatch
    backend = CgroupsBackend({PID: ["cgroup /", BOTH]}, BOTH)
    watch = MachineWatch(backend, DomainChoice("explicit", ({0}, {1}), "explicit"))

    def replan():
        change = watch.replan([PID], lambda: BOTH)
        return change and change[1]
    assert replan() is None
    backend.online = frozenset({0})
    assert replan() == "CPU 1 off-line: domains 0"
    backend.cgroups[PID][1] = {0}
    assert replan() is None
    backend.online = BOTH
    assert replan() == "CPU 1 on-line: domains 0"
    backend.cgroups[PID][1] = BOTH
    assert replan() == "CPU 1 on-line: domains 0 / 1"
    assert replan() is None


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
def test_the_mask_as_set_keeps_the_cpu_sched_getaffinity_leaves_out(two_cpus):
    """What Backend.mask_as_set and inactive_cpus are for, on the real
    kernel: a thread's mask read by sched_getaffinity(2) is cut to the
    active CPUs (an off-line CPU is not one; a CPU being hot-plugged is
    not, for a moment), the status file shows it as set."""
    import threading
    from tumbler.platform.linux.backend import LinuxBackend
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    done, tids = threading.Event(), []
    thread = threading.Thread(target=lambda: (tids.append(threading.get_native_id()),
                                              done.wait()))
    thread.start()
    backend = LinuxBackend()
    try:
        wait_until(lambda: tids, timeout=10, what="the thread started")
        os.sched_setaffinity(tids[0], both)
        _set_online(cpu_b, False)
        try:
            assert backend.allowed_cpus(os.getpid(), tids[0]) == {cpu_a}
            assert backend.mask_as_set(os.getpid(), tids[0]) == both
            assert backend.inactive_cpus() == {cpu_b}     # as this thread's mask shows
        finally:
            _set_online(cpu_b, True)
        assert backend.allowed_cpus(os.getpid(), tids[0]) == both
        assert backend.mask_as_set(os.getpid(), tids[0]) == both
        assert backend.inactive_cpus() == frozenset()
    finally:
        done.set()
        thread.join()
        backend.close()


@linux_root
def test_a_real_cpu_off_line_and_back_is_followed(spawner, procs, state, tmp_path, two_cpus):
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    # The tumbler policy: under auto a machine busy with other work (the
    # rest of the suite) rightly merges the two 1-CPU domains.
    target, tumbler = bound_across(procs, spawner, state, two_cpus, 4, "--policy", "tumbler")
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


def _bound_two_and_two(procs, state, tmp_path, target, two_cpus):
    """``tumbler --domains A/B --policy tumbler -p`` over ``target``'s 4
    spinners, once they are bound two to each CPU: (tumbler, the file its
    stderr goes to)."""
    err = tmp_path / "tumbler.err"
    with open(err, "w") as stderr:
        # The tumbler policy: under auto a machine busy with other work
        # (the rest of the suite) rightly merges the two 1-CPU domains.
        tumbler = procs.start(tumbler_cmd("--domains", "%d/%d" % two_cpus, "--policy", "tumbler",
                                          "-p", str(target.pid)),
                              env=env_for(state), cwd=REPO, stderr=stderr, text=True)
    wait_until(lambda: bound_split(target.pid, *two_cpus) == (2, 2), timeout=20,
               what="two spinners bound to each CPU")
    return tumbler, err


@linux_root
def test_an_admins_taskset_while_a_cpu_is_off_line_is_left_alone(spawner, procs, state, tmp_path,
                                                                 two_cpus):
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    target = spinners(procs, spawner, both, 4)
    tumbler, err = _bound_two_and_two(procs, state, tmp_path, target, two_cpus)
    names = thread_names(target.pid)
    spinning = sorted(tid for tid in names if names[tid].startswith("spawner-"))
    try:
        _set_online(cpu_b, False)
        wait_until(lambda: all(m == both for m in status_masks(target.pid).values()),
                   timeout=20, what="every thread handed back while CPU %d is off-line" % cpu_b)
        os.sched_setaffinity(spinning[0], {cpu_a})      # the admin's taskset
    finally:
        _set_online(cpu_b, True)
    others = spinning[1:]
    wait_until(lambda: all(len(m) == 1 for tid, m in thread_masks(target.pid).items()
                           if tid in others),
               timeout=20, what="the other spinners bound again once CPU %d is back" % cpu_b)
    assert "changed to %d by someone else" % cpu_a in _stderr_of(err)
    tumbler.send_signal(signal.SIGTERM)
    assert tumbler.wait(timeout=30) == 0, _stderr_of(err)
    assert_no_traceback(_stderr_of(err))
    masks = thread_masks(target.pid)
    assert masks[spinning[0]] == {cpu_a}
    assert all(masks[tid] == both for tid in others)


@linux_root
def test_the_service_says_a_real_cpu_change_once(spawner, procs, state, tmp_path, two_cpus):
    from support.service import Service, config
    from support.service import spinners as tagged_spinners
    cpu_a, cpu_b = two_cpus
    _can_take_off_line(cpu_b)
    both = frozenset(two_cpus)
    tag = "hotplug-%d" % os.getpid()
    programs = [tagged_spinners(procs, spawner, both, 2, tag) for _ in range(2)]
    service = Service(procs, state, tmp_path, config(
        '  - name: hot\n    match: {cmdline: "%s"}\n    domains: "%d/%d"\n    policy: tumbler\n'
        % (tag, cpu_a, cpu_b)))
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


# -- a real cgroup cpuset narrowed and widened (v1 here; v2 with the swap) ----------


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _stderr_of(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def narrowed_and_widened(procs, spawner, state, tmp_path, two_cpus, cgroup, enter):
    """4 spinners in ``cgroup`` (a directory with cpuset.cpus), ``enter``
    the file that moves a process in, balanced over --domains A/B; the
    cpuset narrowed to A, then widened to A-B again."""
    from tumbler.cpulist import format_cpulist
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)
    target = spinners(procs, spawner, both, 4)
    _write(os.path.join(cgroup, enter), str(target.pid))
    tumbler, err = _bound_two_and_two(procs, state, tmp_path, target, two_cpus)
    _write(os.path.join(cgroup, "cpuset.cpus"), str(cpu_a))
    narrowed = "CPUs %d (was %s): domains %d" % (cpu_a, format_cpulist(both), cpu_a)
    seen = []

    def handed_back():
        masks = status_masks(target.pid)
        seen.extend(masks.values())
        return narrowed in _stderr_of(err)
    wait_until(handed_back, timeout=20, what="tumbler to follow the narrowed cpuset")
    # Never a thread bound to the CPU the cpuset took (the masks set, as
    # /proc shows them): the kernel moved those there, tumbler handed them
    # back, within the cpuset.
    for _ in range(20):
        seen.extend(status_masks(target.pid).values())
    assert seen and not [m for m in seen if cpu_b in m], seen
    _write(os.path.join(cgroup, "cpuset.cpus"), format_cpulist(both))
    wait_until(lambda: bound_split(target.pid, cpu_a, cpu_b) == (2, 2), timeout=20,
               what="two spinners bound to each CPU again once the cpuset is widened")
    tumbler.send_signal(signal.SIGTERM)
    status = tumbler.wait(timeout=30)
    stderr = _stderr_of(err)
    assert_no_traceback(stderr)
    assert status == 0, stderr
    assert "CPUs %s (was %d): domains %d / %d" % (format_cpulist(both), cpu_a, cpu_a, cpu_b) \
        in stderr, stderr
    assert "someone else" not in stderr, stderr
    assert all(m == both for m in thread_masks(target.pid).values())


@linux_root
def test_a_real_cgroup_v1_cpuset_narrowed_and_widened_is_followed(
        spawner, procs, state, tmp_path, two_cpus, v1_cgroup):
    narrowed_and_widened(procs, spawner, state, tmp_path, two_cpus, v1_cgroup, "cgroup.procs")


@pytest.fixture
def v1_cgroup(two_cpus):
    """A cgroup v1 cpuset of the two CPUs, removed at the end (its tasks
    moved back to the root first)."""
    from support.helpers import cpuset_mount
    from tumbler.cpulist import format_cpulist
    mount = cpuset_mount()
    if mount is None:
        pytest.skip("no cgroup v1 cpuset hierarchy mounted here")
    cgroup = os.path.join(mount, "tumbler-test.%d" % os.getpid())
    os.mkdir(cgroup)
    try:
        _write(os.path.join(cgroup, "cpuset.cpus"), format_cpulist(two_cpus))
        _write(os.path.join(cgroup, "cpuset.mems"), _read(os.path.join(mount, "cpuset.mems")))
        yield cgroup
    finally:
        for tid in _read(os.path.join(cgroup, "tasks")).split():
            try:
                _write(os.path.join(mount, "tasks"), tid)
            except OSError:
                pass
        os.rmdir(cgroup)


@linux_root
def test_the_service_says_a_real_cpuset_change_once(spawner, procs, state, tmp_path, two_cpus,
                                                     v1_cgroup):
    from support.service import Service, config
    from support.service import spinners as tagged_spinners
    from tumbler.cpulist import format_cpulist
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)
    tag = "cpuset-%d" % os.getpid()
    programs = [tagged_spinners(procs, spawner, both, 2, tag) for _ in range(2)]
    for program in programs:
        _write(os.path.join(v1_cgroup, "cgroup.procs"), str(program.pid))
    service = Service(procs, state, tmp_path, config(
        '  - name: set\n    match: {cmdline: "%s"}\n    domains: "%d/%d"\n    policy: tumbler\n'
        % (tag, cpu_a, cpu_b)))
    wait_until(lambda: all(bound_split(p.pid, cpu_a, cpu_b) == (1, 1) for p in programs),
               timeout=20, what="each program's spinners bound one to each CPU")
    where = "cgroup /" + os.path.basename(v1_cgroup)
    _write(os.path.join(v1_cgroup, "cpuset.cpus"), str(cpu_a))
    wait_until(lambda: "%s: CPUs %d (was %s): 2 programs re-planned"
               % (where, cpu_a, format_cpulist(both)) in service.log(),
               timeout=20, what="the service to say the narrowed cpuset once")
    _write(os.path.join(v1_cgroup, "cpuset.cpus"), format_cpulist(both))
    wait_until(lambda: all(bound_split(p.pid, cpu_a, cpu_b) == (1, 1) for p in programs),
               timeout=20, what="bound one to each CPU again once the cpuset is widened")
    wait_until(lambda: "%s: CPUs %s (was %d): 2 programs re-planned"
               % (where, format_cpulist(both), cpu_a) in service.log(),
               timeout=20, what="the service to say the widened cpuset once")
    assert service.stop() == 0
    log = service.log()
    assert log.count(where + ":") == 2, log
    assert "someone else" not in log, log
    assert all(m == both for p in programs for m in thread_masks(p.pid).values())


@pytest.fixture
def cgroup2_cpuset_now():
    """The cgroup2 mount with the cpuset controller on it, for one test:
    moved there from its v1 hierarchy with TUMBLER_TEST_CGROUP_SWAP=1, and
    back after (test_cpuset_v2_real.py's swap, for one test only)."""
    from support import cgroup2 as v2real
    from support.helpers import cpuset_mount
    v2 = v2real.cgroup2_mount()
    if v2 is None:
        pytest.skip("no cgroup2 hierarchy mounted")
    if "cpuset" in v2real.controllers(v2):
        yield v2
        return
    v1, options = cpuset_mount(), v2real.v1_cpuset_options()
    if v1 is None:
        pytest.skip("cpuset is on neither cgroup v2 nor a mounted v1 hierarchy")
    if os.environ.get(v2real.SWAP_ENV) != "1":
        pytest.skip("cpuset is on cgroup v1 here; %s=1 lets this test move it to v2 "
                    "for a moment" % v2real.SWAP_ENV)
    v2real.release_v1_cpuset(v1)
    try:
        for _ in range(50):
            if "cpuset" in v2real.controllers(v2):
                break
            time.sleep(0.1)
        else:
            pytest.skip("cpuset did not move to cgroup v2 after unmounting %s" % v1)
        yield v2
    finally:
        v2real.remount_v1_cpuset(v1, options)


@linux_root
def test_a_real_cgroup_v2_cpuset_narrowed_and_widened_is_followed(
        spawner, procs, state, tmp_path, two_cpus, cgroup2_cpuset_now):
    from tumbler.cpulist import format_cpulist
    v2 = cgroup2_cpuset_now
    root_control = _read(os.path.join(v2, "cgroup.subtree_control")).split()
    if "cpuset" not in root_control:
        _write(os.path.join(v2, "cgroup.subtree_control"), "+cpuset")
    cgroup = os.path.join(v2, "tumbler-test.%d" % os.getpid())
    os.mkdir(cgroup)
    try:
        _write(os.path.join(cgroup, "cpuset.cpus"), format_cpulist(two_cpus))
        narrowed_and_widened(procs, spawner, state, tmp_path, two_cpus, cgroup, "cgroup.procs")
    finally:
        for pid in _read(os.path.join(cgroup, "cgroup.procs")).split():
            try:
                _write(os.path.join(v2, "cgroup.procs"), pid)
            except OSError:
                pass
        os.rmdir(cgroup)
        if "cpuset" not in root_control:
            _write(os.path.join(v2, "cgroup.subtree_control"), "-cpuset")


# -- fixture trees: the topology read again, cgroup cpusets read ---------------------

ALL = frozenset(range(4))


def _put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def sysfs(root, online, llcs, isolated=""):
    """/sys/devices/system/cpu of one package whose on-line CPUs share the
    last-level caches ``llcs``; an off-line CPU has no topology or cache
    (Linux removes them)."""
    import shutil
    from tumbler.cpulist import format_cpulist
    cpu_dir = os.path.join(root, "sys/devices/system/cpu")
    _put(os.path.join(cpu_dir, "online"), format_cpulist(online) + "\n")
    _put(os.path.join(cpu_dir, "isolated"), isolated + "\n")
    _put(os.path.join(cpu_dir, "nohz_full"), "\n")
    for cpu in ALL:
        shutil.rmtree(os.path.join(cpu_dir, "cpu%d" % cpu), ignore_errors=True)
    for cpu in online:
        base = os.path.join(cpu_dir, "cpu%d" % cpu)
        _put(base + "/topology/package_cpus_list", format_cpulist(online))
        _put(base + "/topology/core_cpus_list", str(cpu))
        _put(base + "/cache/index3/level", "3")
        _put(base + "/cache/index3/type", "Unified")
        _put(base + "/cache/index3/shared_cpu_list",
             format_cpulist(next(llc for llc in llcs if cpu in llc)))


def watch_over(backend, choice):
    from tumbler.balance.machine import MachineWatch
    watch = MachineWatch(backend, choice)
    assert watch.replan([], lambda: ALL) is None        # the first look: as planned
    return watch


def domains_after(watch):
    choice, note = watch.replan([], lambda: ALL)
    return [sorted(d) for d in choice.domains], note


def test_domains_of_a_level_are_derived_again_from_the_topology_read_at_a_change(
        tmp_path, every_round):
    from tumbler.balance.domains import choose_domains
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    sysfs(root, ALL, [{0, 1}, {2, 3}])
    backend = LinuxBackend(root)
    planned = choose_domains(backend.topology(), ALL, "llc")
    assert planned.domains == ({0, 1}, {2, 3})
    watch = watch_over(backend, planned)
    sysfs(root, {0, 1, 2}, [{0, 1}, {2}])
    assert domains_after(watch) == ([[0, 1], [2]], "CPU 3 off-line: domains 0-1 / 2")
    # Back in a last-level cache of its own (a VM's vCPU placed elsewhere):
    # the domains are the topology's now, not the plan's 2-3.
    sysfs(root, ALL, [{0, 1}, {2}, {3}])
    assert domains_after(watch) == ([[0, 1], [2], [3]], "CPU 3 on-line: domains 0-1 / 2 / 3")
    # CPUs isolated since the run began are left out at the next change.
    sysfs(root, {0, 1, 3}, [{0, 1}, {3}], isolated="1")
    assert domains_after(watch) == ([[0], [3]], "CPU 2 off-line: domains 0 / 3")


def test_explicit_domains_keep_their_definition_whatever_the_topology(tmp_path, every_round):
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    sysfs(root, ALL, [{0, 1}, {2, 3}])
    watch = watch_over(LinuxBackend(root), DomainChoice(
        "explicit", (frozenset({0, 1}), frozenset({2, 3})), "explicit domains: 0-1 / 2-3"))
    sysfs(root, {0, 1, 2}, [{0}, {1}, {2}], isolated="1")
    assert domains_after(watch) == ([[0, 1], [2]], "CPU 3 off-line: domains 0-1 / 2")


V1_MOUNTS = ("cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,cpuset 0 0\n"
             "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n"


def cgroup_tree(root, mounts, cgroups, files):
    """/proc/self/mounts, /proc/300/cgroup, and files under /sys/fs/cgroup."""
    _put(os.path.join(root, "proc/self/mounts"), mounts)
    _put(os.path.join(root, "proc/300/cgroup"), cgroups)
    for path, text in files.items():
        _put(os.path.join(root, "sys/fs/cgroup", path), text + "\n")


def test_a_v1_cpuset_is_read_where_cgroup_v2_is_mounted_beside_it(tmp_path):
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    sysfs(root, ALL, [ALL])
    cgroup_tree(root, V1_MOUNTS, "4:memory:/x\n3:cpuset:/app\n0::/\n",
                {"cpuset/app/cpuset.effective_cpus": "0-1", "cpuset/app/cpuset.cpus": "0-3"})
    backend = LinuxBackend(root)
    assert backend.cpuset_cpus(300) == ("cgroup /app", {0, 1})
    assert backend.may_use(300) == {0, 1}
    _put(os.path.join(root, "sys/fs/cgroup/cpuset/app/cpuset.effective_cpus"), "1\n")
    assert backend.cpuset_cpus(300) == ("cgroup /app", {1})
    # Moved by --binder cpuset into a cgroup of a tumbler's: the one it
    # was made in.
    _put(os.path.join(root, "proc/300/cgroup"), "3:cpuset:/app/tumbler.77/d1\n0::/\n")
    assert backend.cpuset_cpus(300) == ("cgroup /app", {1})
    os.remove(os.path.join(root, "proc/300/cgroup"))
    from tumbler.platform.base import NoSuchProcess
    with pytest.raises(NoSuchProcess):
        LinuxBackend(root).cpuset_cpus(300)
    backend.close()


def test_kept_descriptors_are_bounded(tmp_path, monkeypatch):
    """Processes of a tree come and go: the descriptors kept for them are
    closed once there are MAX_FILES, and read again as needed."""
    from tumbler.platform.linux import cpuset
    from tumbler.platform.linux.backend import LinuxBackend
    monkeypatch.setattr(cpuset.CgroupCpus, "MAX_FILES", 3)
    root = str(tmp_path)
    cgroup_tree(root, V1_MOUNTS, "3:cpuset:/app\n", {"cpuset/app/cpuset.effective_cpus": "0-1"})
    for pid in range(301, 306):
        _put(os.path.join(root, "proc/%d/cgroup" % pid), "3:cpuset:/app\n")
    backend = LinuxBackend(root)
    for pid in range(300, 306):
        assert backend.cpuset_cpus(pid) == ("cgroup /app", {0, 1})
        assert len(backend._cpusets._cgroup_fds) <= 3
    backend.close()
    assert not backend._cpusets._cgroup_fds and not backend._cpusets._file_fds


def test_a_v1_cpuset_without_effective_cpus_is_read_from_its_cpus(tmp_path):
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    cgroup_tree(root, V1_MOUNTS, "3:cpuset:/app\n", {"cpuset/app/cpuset.cpus": "2-3"})
    assert LinuxBackend(root).cpuset_cpus(300) == ("cgroup /app", {2, 3})


def test_a_v2_cpuset_is_the_nearest_cgroup_with_the_controller(tmp_path):
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    cgroup_tree(root, V2_MOUNTS, "0::/a/b\n",
                {"cgroup.controllers": "cpuset cpu", "cpuset.cpus.effective": "0-3",
                 "a/cpuset.cpus.effective": "2-3", "a/b/cgroup.procs": "300"})
    assert LinuxBackend(root).cpuset_cpus(300) == ("cgroup /a/b", {2, 3})


def test_no_cpuset_controller_anywhere_is_no_cpuset(tmp_path):
    from tumbler.platform.linux.backend import LinuxBackend
    root = str(tmp_path)
    cgroup_tree(root, V2_MOUNTS, "0::/a\n", {"cgroup.controllers": "cpu io memory"})
    assert LinuxBackend(root).cpuset_cpus(300) is None


# -- illumos: processor sets and CPUs off-line, on fixture trees ----------------------

OURS = (frozenset({0, 1, 2}), frozenset({3, 4, 5}))


def illumos_run(tmp_path, lwps=None):
    """8 CPUs, CPU 7 in an administrator's set 7, a process of two LWPs,
    and a pset binder whose sets 8 and 9 hold 0-2 and 3-5."""
    from support import illumos_fixtures as fx
    from support.illumos_fakes import PID as IPID, FakeLibc, lwp
    from tumbler.platform.illumos.backend import IllumosBackend
    root = str(tmp_path)
    fx.write_kstat(root, fx.machine(1, 2, 2, 2))
    fx.write_process(root, IPID, {}, lwps or [lwp(1), lwp(2)])
    libc = FakeLibc(cpus=range(8), psets={7: {7}})
    backend = IllumosBackend(root, libc=libc)
    binder = backend.binder("pset")
    binder.setup(OURS)
    for tid in (1, 2):
        binder.save(IPID, tid)
    assert binder.sets == [8, 9] and libc.default == {6}
    return IPID, libc, backend, binder


def set_states(tmp_path, offline):
    from support import illumos_fixtures as fx
    fx.write_kstat(str(tmp_path), fx.machine(1, 2, 2, 2, offline=offline))


def replanned(watch, pid, binder):
    """The watch's re-plan, as the controller follows it: the binder sets
    up the domains (Controller._reshape)."""
    choice, note = watch.replan([pid], lambda: frozenset(range(7)))
    binder.setup(choice.domains)
    return [sorted(d) for d in choice.domains], note


def test_illumos_a_cpu_taken_out_of_a_set_of_tumblers_leaves_the_domains(tmp_path, every_round):
    from tumbler.balance.machine import MachineWatch
    pid, libc, backend, binder = illumos_run(tmp_path)
    watch = MachineWatch(backend, DomainChoice("explicit", OURS, "explicit domains"))
    assert watch.replan([pid], lambda: frozenset(range(7))) is None
    assert backend.cpuset_cpus(pid) == ("the default processor set", set(range(7)))
    # psrset -r 4: into the default set.
    libc.psets[9].discard(4)
    libc.default.add(4)
    assert replanned(watch, pid, binder) == (
        [[0, 1, 2], [3, 5]],
        "the default processor set: CPUs 0-3,5-6 (was 0-6): domains 0-2 / 3,5")
    # The sets are made again without it; it stays where the admin put it.
    assert libc.psets[binder.sets[1]] == {3, 5} and 4 in libc.default
    assert watch.replan([pid], lambda: frozenset(range(7))) is None
    assert binder.taken_cpus == {4}


def test_illumos_a_cpu_of_a_set_of_tumblers_off_line_and_back(tmp_path, every_round):
    """psradm -f 5: pset_info no longer lists it (cpupart_get_cpus lists
    on-line CPUs); the sets made again leave it out; back on-line, it is
    in the default set (cpupart_destroy reset its partition) and taken
    into the domain again."""
    from tumbler.balance.machine import MachineWatch
    pid, libc, backend, binder = illumos_run(tmp_path)
    watch = MachineWatch(backend, DomainChoice("explicit", OURS, "explicit domains"))
    assert watch.replan([pid], lambda: frozenset(range(7))) is None
    set_states(tmp_path, offline={5})
    libc.psets[9].discard(5)
    assert replanned(watch, pid, binder) == (
        [[0, 1, 2], [3, 4]],
        "CPU 5 off-line: domains 0-2 / 3-4")
    assert binder.taken_cpus == frozenset()         # off-line is not taken
    set_states(tmp_path, offline=())
    libc.default.add(5)
    assert replanned(watch, pid, binder) == (
        [[0, 1, 2], [3, 4, 5]],
        "CPU 5 on-line: domains 0-2 / 3-5")
    assert libc.psets[binder.sets[1]] == {3, 4, 5}


def test_illumos_a_process_in_an_administrators_set_has_that_sets_cpus(tmp_path):
    from support.illumos_fakes import lwp
    pid, libc, backend, binder = illumos_run(tmp_path, [lwp(1, bindpset=7), lwp(2, bindpset=7)])
    assert backend.cpuset_cpus(pid) == ("processor set 7", {7})
    libc.psets[7].add(6)                        # psrset -a 7 6
    libc.default.discard(6)
    assert backend.cpuset_cpus(pid) == ("processor set 7", {6, 7})


def test_illumos_a_set_of_tumblers_destroyed_and_its_id_reused_is_not_taken_for_ours(
        tmp_path, every_round):
    """psrset -d 9, then psrset -c 7... -- a new set with tumbler's old id
    and CPUs of someone else's: not one of tumbler's CPUs."""
    from tumbler.balance.machine import MachineWatch
    pid, libc, backend, binder = illumos_run(tmp_path)
    watch = MachineWatch(backend, DomainChoice("explicit", OURS, "explicit domains"))
    assert watch.replan([pid], lambda: frozenset(range(7))) is None
    libc.default |= libc.psets.pop(9)               # destroyed: its CPUs to the default set
    libc.psets[9] = {6}                             # a new set, the same id
    libc.default.discard(6)
    assert replanned(watch, pid, binder) == (
        [[0, 1, 2]], "the default processor set: CPUs 0-2 (was 0-6): domains 0-2")
    assert binder.taken_cpus == {3, 4, 5}
    assert libc.psets[9] == {6}                     # someone else's, left alone



@pytest.mark.parametrize("keeps_requested", (False, True))
def test_a_mask_cut_by_a_kernel_before_6_2_counts_as_the_kernels_reset(every_round,
                                                                       keeps_requested):
    """A thread tumbler bound to CPUs 0-1 that shows CPU 0 alone after CPU
    1 went off-line and came back: before Linux 6.2 the kernel may have cut
    the mask for good (reset_by_kernel, the thread stays tumbler's); a
    kernel that keeps the mask asked for did not, so that is someone
    else's doing (left alone)."""
    backend = HotplugBackend(cpus={0, 1, 2}, keeps_requested=keeps_requested)
    watch = MachineWatch(backend)
    watch.add(PID)
    watch.look([PID])
    backend.offline(1)
    watch.look([PID])
    backend.back_online(1)
    watch.look([PID])
    assert watch.reset_by_kernel(PID, frozenset({0, 1}), frozenset({0})) is not keeps_requested
    assert (frozenset({0}) in watch.kernel_masks(PID, frozenset({0, 1}))) is not keeps_requested
