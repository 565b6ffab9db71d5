"""A process's own peak resident size, for the memory figures the tests and benchmarks
report.

Linux's ``ru_maxrss`` of a process started by fork and exec is at least its parent's
resident size at the fork (the exec records the forked copy's high-water mark), so a
command run by a 2 GB benchmark or test session would read 2 GB. ``VmHWM`` is the
exec'd image's own high-water mark, and writing 5 to ``/proc/self/clear_refs`` starts it
again; ``ru_maxrss`` where /proc is absent. Subprocesses import this module by putting
:data:`TESTS` on their path.
"""

import resource
from pathlib import Path

#: this directory, for a subprocess's ``sys.path``
TESTS = str(Path(__file__).resolve().parent)


def peak_rss_kib():
    """This process's peak resident size (KiB) since it started or since
    :func:`reset_peak_rss`."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak_rss():
    """Start this process's high-water mark again (Linux), so that the next figure is
    the work that follows, not the largest so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
