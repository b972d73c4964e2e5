"""One handler.py graded: its trials, checks and verdict.

grading.py is the entry (python3 -m grader [--handler PATH]): a grading
broker, then runner.py runs checks.py's checks, each a few trials made of
steps.py's steps; findings.py holds what a check finds and its words,
trial_story.py tells a failed trial's story, and live.py reads the live
lab's results read-only.
"""
