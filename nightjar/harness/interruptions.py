"""The lab's two kinds of interruption of a real worker, shared by the grader, the unit checks and ./solve.

- ctrl_c_at(): as the learner does it: `python3 worker.py --pause POINT`,
  then Ctrl+C (SIGINT) when it prints `Paused POINT.`;
- stop_at_effect(): the worker kills itself at a real effect (just before
  its first database write, the commit of its ticket, just after that commit,
  or just before its basic_ack), wherever handler.py put (or forgot) its
  checkpoints (see effects.py).

Both return the finished processes.Running: returncode, lines, stderr,
timed_out, and events when the lab watched the run.
"""


from .processes import NeverPrinted, OwnClock


def ctrl_c_at(lab, point, *args, timeout=None, on_pause=None, watch=False, stderr_limit=None):
    """Start the worker with --pause POINT and press Ctrl+C at `Paused POINT.`.

    lab: a Lab, or anything that starts the worker as Lab.start does and has
    a worker_timeout (./solve's Desk, on the live lab).
    on_pause(worker) runs just before Ctrl+C, while the worker waits at the
    checkpoint (worker.lines: what it printed so far); should it raise, the
    worker is stopped. The run up to the pause has `timeout` seconds of its
    own time (default the lab's worker_timeout), and so has its stop after
    Ctrl+C; the worker is killed when either runs out. The result's `paused`
    says whether it ever printed the pause line.
    """
    timeout = timeout or lab.worker_timeout
    worker = lab.start("worker.py", *args, "--pause", point, watch=watch, stderr_limit=stderr_limit)
    worker.time_limit = timeout
    clock = OwnClock(worker.process.pid, timeout, worker.members, worker.peers)
    try:
        worker.wait_for(f"Paused {point}.", clock=clock)
    except NeverPrinted:
        worker.paused = False
        worker.finish(clock=clock)
        return worker
    worker.paused = True
    if on_pause:
        try:
            on_pause(worker)
        except BaseException:
            worker.stop()
            raise
    # Its own time from Ctrl+C on: the pause (waiting for Enter while the caller looks at the
    # lab) is not the worker's to spend.
    worker.interrupt(clock=OwnClock(worker.process.pid, timeout, worker.members, worker.peers))
    return worker


def stop_at_effect(lab, effect, *args, timeout=None, stderr_limit=None):
    """Run the worker until it kills itself at EFFECT (its events say whether it got there)."""
    worker = lab.start("worker.py", *args, stop_at=effect, stderr_limit=stderr_limit)
    worker.finish(timeout=timeout or lab.worker_timeout)
    return worker
