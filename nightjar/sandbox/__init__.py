"""The grader's sandbox: everything that confines a submission's code while it is graded.

Linux's own mechanisms, as root. The grader (trusted) uses this package;
nothing here imports the grader. One Sandbox (submission.py) per graded
handler.py; one Trial (trial.py) per throwaway lab the grader runs it in (a
check's variant). Everything a worker of a trial runs (the learner's
handler.py and whatever it starts) is:

- another user: each trial has a uid and gid of its own, from a block of
  uids that one sandbox holds at a time (uids.py: a lock file per block);
  never the grader's, never another submission's or another trial's;
- limited: the trial's control group (cgroups.py) bounds memory and
  processes, the submission's bounds their sum; on the CPU it weighs as one
  busy process a trial (CPU_WEIGHT), however many it forks, so a submission
  spinning every core leaves the others (and the grader, the relay and the
  broker) their share; rlimits bound CPU time and file size per process,
  and no core files are written;
- in a root of its own (root.py): the system and the interpreter
  read-only, the lab's packages, a small tmpfs for the sandbox's files
  (bounded: a full disk fails one submission); not the class folder, the
  checkout or anyone's home; /proc shows a user only its own processes;
- on a network of its own (relay.py): only 127.0.0.1:5672, relayed to the
  grading broker, where it logs in as a user allowed on the submission's
  own vhost and nowhere else (nightjar/rabbitadmin.py).

A worker run is a child forked by the submission's launcher (launch.py:
pika and the lab's runtime imported once), confined as the trial's command
line would confine a fresh one and checked by the grader before it runs
anything of the submission's; a fresh interpreter when the launcher fails.

After each worker run the trial's whole control group is killed (a double
fork and setsid included) and its broker connections closed, so nothing it
started can act on its files or its queue while the grader looks. The
grader reads a trial's files only while none of its processes runs, and
only files that are what they should be (verification.py; Tampered
otherwise), the lab's tables in them as it reads them on every route
(nightjar/harness/reading.py). close() kills everything left, deletes the
vhost and the user, and unmounts the tmpfs holding every file the sandbox
could write.

The grader must call enter_private_mounts() first, while it has one thread
(machine.py: what this machine must offer): the tmpfs is mounted in the
grader's own mount namespace, so it never shows (or stays behind) anywhere
else, even when the grader is killed.
"""
from .machine import Unavailable, enter_private_mounts, unavailable_reason
from .submission import Limits, Sandbox, existing_group, new_group_name
from .uids import UID_BASE_ENV
from .verification import Tampered

__all__ = ["UID_BASE_ENV", "Limits", "Sandbox", "Tampered", "Unavailable", "enter_private_mounts",
           "existing_group", "new_group_name", "unavailable_reason"]
