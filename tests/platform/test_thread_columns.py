"""ThreadColumns (platform/columns.py): a sample's threads as columns,
read as the mapping {tid: ThreadTimes} a per-thread sample gives."""

from array import array

from tumbler.platform.base import NO_MICROSTATES, ThreadTimes
from tumbler.platform.columns import ThreadColumns


def columns(run=(5, 7, 9), lat=(1, 0, 2)):
    tids = tuple([30, 10, 20])          # a new tuple each time (not the code's constant)
    return ThreadColumns(tids, frozenset(tids), tuple([300, 100, 200]), ("a", "b", "c"),
                         array("q", run), array("q", lat))


def test_the_mapping_is_what_the_per_thread_path_builds_in_the_columns_order():
    threads = columns()
    expected = {30: ThreadTimes(30, 300, "a", 5, lat_ns=1),
                10: ThreadTimes(10, 100, "b", 7, lat_ns=0),
                20: ThreadTimes(20, 200, "c", 9, lat_ns=2)}
    assert threads == expected and threads.as_dict() == expected
    assert list(threads) == list(threads.keys()) == [30, 10, 20]
    assert list(threads.items()) == list(expected.items())
    assert threads[10].micro is NO_MICROSTATES and threads[10].state == "?"
    assert type(threads[10].run_ns) is int
    assert len(threads) == 3 and 20 in threads and 40 not in threads
    assert threads.get(40) is None and threads.get(30).name == "a"
    assert threads.keys() - {10} == {20, 30}
    assert threads != columns(run=(5, 7, 8))
    assert threads.as_dict() is threads.as_dict()       # built once


def test_samples_of_one_set_of_threads_pair_by_position():
    first = columns()
    later = ThreadColumns(first.tids, first.tid_set, first.starts, first.names,
                          array("q", [6, 8, 10]), array("q", [1, 1, 2]))
    assert later.same_threads(first)
    assert not columns().same_threads(first)        # equal, not the same set: by the mapping
