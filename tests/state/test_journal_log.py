"""The journal's log (state/journal.py): a thread's record is one line
appended, not a rewrite of every record; the state file is rewritten
(compacted) only once the log is as long as it; ``tumbler restore`` after a
SIGKILL at any moment -- before a compaction, or between its rewrite and
the log's truncation -- puts back every thread recorded, and none dropped.
On a scripted system (support/restore_system.py)."""

import os

import pytest

from support.restore_system import TARGET, System
from tumbler.state import Journal, StateFile, restore_state
from tumbler.state import journal as journal_module
from tumbler.state import paths as paths_module

THREADS = range(101, 131)


def system():
    return System({TARGET: (10, {TARGET: 10, **{tid: tid for tid in THREADS}}, 1)},
                  masked=set())


def killed(journal):
    """What SIGKILL leaves: the files as they are, the lock free."""
    for target in journal.targets.values():
        if target.log_fd is not None:
            os.close(target.log_fd)
        target.lock.release(unlink=False)
    journal.targets.clear()


def bind(journal, tids, cpus=frozenset({0})):
    """What the Placer does: records (one batch), then the masks logged and set."""
    with journal.batch():
        for tid in tids:
            journal.record(TARGET, tid, tid, "affinity", {"cpus": [0, 1]})
    journal.set_masks([(TARGET, tid, tid, cpus, None) for tid in tids])
    journal.masks_set()


def restored_after_kill(journal, backend, directory):
    killed(journal)
    report = restore_state(StateFile(str(directory), TARGET, 10), backend)
    assert not report.failed, report.errors
    return sorted(tid for _, tid in backend.restored)


def test_a_record_is_a_line_of_the_log_not_a_rewrite_of_every_record(tmp_path, monkeypatch):
    """Issue 47: with 2,000 threads recorded, one more costs its own line,
    not the 2,000 others rewritten (667 KB at 8,000 threads, for each
    thread born)."""
    backend = System({TARGET: (10, {TARGET: 10}, 1)}, masked=set())
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    with journal.batch():
        for tid in range(1000, 3000):
            journal.record(TARGET, tid, tid, "affinity", {"cpus": [0, 1]})
    written = []
    real_write, real_atomic = os.write, paths_module.write_atomic

    def counted_write(fd, data):
        written.append(len(data))
        return real_write(fd, data)

    def counted_atomic(path, payload):
        written.append(len(payload))
        return real_atomic(path, payload)
    monkeypatch.setattr(os, "write", counted_write)
    monkeypatch.setattr(paths_module, "write_atomic", counted_atomic)
    monkeypatch.setattr(journal_module, "write_atomic", counted_atomic, raising=False)
    journal.record(TARGET, 3000, 3000, "affinity", {"cpus": [0, 1]})
    journal.drop(TARGET, 1000)
    journal.set_masks([(TARGET, 3000, 3000, {0}, None)])
    journal.masks_set()
    assert 0 < sum(written) < 300, written
    journal.close()


def test_restore_after_a_kill_puts_back_what_the_log_recorded_and_not_what_it_dropped(
        tmp_path):
    backend = system()
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    bind(journal, THREADS[:10])
    journal.drop(TARGET, THREADS[3])            # handed back since
    bind(journal, THREADS[10:12], frozenset({1}))
    journal.drop(TARGET, THREADS[4])            # not on disk yet when killed: restored again
    assert restored_after_kill(journal, backend, tmp_path) == sorted(
        set(THREADS[:12]) - {THREADS[3]})


@pytest.mark.parametrize("truncated", [True, False])
def test_a_kill_around_a_compaction_restores_the_same(tmp_path, monkeypatch, truncated):
    """A log as long as the file is folded into it (the file rewritten,
    then the log emptied); killed between the two, the log replays over
    the new file to the same records."""
    monkeypatch.setattr(journal_module, "LOG_COMPACT_MIN_BYTES", 1)
    backend = system()
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    with monkeypatch.context() as patch:
        if not truncated:
            def refused(fd, length):
                raise OSError(5, "killed before the truncation")
            patch.setattr(os, "ftruncate", refused)
        for tid in THREADS[:20]:
            bind(journal, [tid])
        journal.drop(TARGET, THREADS[0])
        bind(journal, [THREADS[20]])
    state_file = StateFile(str(tmp_path), TARGET, 10)
    with open(state_file.log_path, "rb") as log:
        first_record_logged = b'"tid":101}' in log.read()
    assert first_record_logged != truncated         # compacted, and emptied or not
    assert restored_after_kill(journal, backend, tmp_path) == list(THREADS[1:21])


def test_a_torn_or_hostile_log_line_is_passed_over(tmp_path):
    backend = system()
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    bind(journal, THREADS[:2])
    state_file = StateFile(str(tmp_path), TARGET, 10)
    with open(state_file.log_path, "ab") as log:
        log.write(b"r " + b"[" * 100000 + b"\n")                       # too deep
        log.write(b'r {"tid": -5, "saved": {"cpus": [0]}}\n')         # not a record
        log.write(b'r {"tid": 131, "start": 131, "saved": {"cpus": [0')   # torn
    assert restored_after_kill(journal, backend, tmp_path) == list(THREADS[:2])


def test_the_logs_floor_stays_where_its_measurement_holds():
    """LOG_COMPACT_MIN_BYTES (BENCHMARKS.md, "Cost that follows what
    changes": 800 records replayed in 4.6 ms): below 4 KiB a small
    program's file is rewritten every ~50 records; above 1 MiB restore
    replays ~13,000 lines of a log that could have been folded."""
    assert 4 << 10 <= journal_module.LOG_COMPACT_MIN_BYTES <= 1 << 20


def test_a_torn_last_line_that_parses_as_another_is_passed_over(tmp_path):
    """A drop torn mid-write ("d PID 12" of "d PID 120") must not drop
    thread 12's record: a last line without its newline is torn, whatever
    it parses as, and thread 12 is still put back."""
    backend = System({TARGET: (10, {TARGET: 10, 12: 12, 120: 120}, 1)}, masked=set())
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    bind(journal, [12, 120])
    state_file = StateFile(str(tmp_path), TARGET, 10)
    with open(state_file.log_path, "ab") as log:
        log.write(b"d %d 12" % TARGET)                              # of "d PID 120\n"
    assert restored_after_kill(journal, backend, tmp_path) == [12, 120]


def test_a_log_that_cannot_be_emptied_is_folded_again_only_once_it_has_grown_again(
        tmp_path, monkeypatch):
    """ftruncate refused (the log stays as long as it was): the state file
    is not rewritten at every append after, but once the log has grown by
    as much again -- and restore still puts back every thread."""
    monkeypatch.setattr(journal_module, "LOG_COMPACT_MIN_BYTES", 1)
    backend = system()
    journal = Journal(backend, str(tmp_path))
    journal.claim(TARGET, allowed={0, 1})
    rewrites = []
    real_atomic = journal_module.write_atomic

    def counted(path, payload):
        rewrites.append(len(payload))
        return real_atomic(path, payload)

    def refused(fd, length):
        raise OSError(5, "cannot truncate")
    monkeypatch.setattr(journal_module, "write_atomic", counted)
    monkeypatch.setattr(os, "ftruncate", refused)
    for tid in THREADS[:24]:
        bind(journal, [tid])
    assert 0 < len(rewrites) <= 8, rewrites      # the log doubling: not 24 or more
    monkeypatch.undo()
    assert restored_after_kill(journal, backend, tmp_path) == list(THREADS[:24])
