"""Shared code of the Nightjar ticket-desk lab.

The modules here are the facts the site, the Workstation programs
(ticket-desk/), the scenarios and the grader share, each in one place:
config (settings), db (schema), registrations, messages (the job format),
broker (queue topology), queueing (saving and queueing a registration),
events (what the worker reports to the grader), history (each delivery's
story, kept beside the live database), stories (that story told, for
desk.py history and the site) and compose (which Docker Compose drives the
container lab, and whether it runs).

    runtime/   what ticket-desk/worker.py and desk.py run on
    harness/   throwaway labs and real processes, for the grader, the unit
               scripts, make local and the tests
"""
