"""The Nightjar grader: handler.py against a second broker and throwaway databases.

`python3 -m grader --help` for the options; cli.py runs it, checks.py holds
the checks; the throwaway labs, the interruptions and the private RabbitMQ node
are the harness (nightjar/harness/); live.py is the read-only look at the live results.
"""
