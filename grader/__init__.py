"""The Nightjar grader: handler.py against a second broker and throwaway databases.

`python3 -m grader --help` for the options; cli.py runs it, checks.py holds
the checks, effects.py the interruptions at the real effects, node.py the
private RabbitMQ node, live.py the read-only look at the live results.
"""
