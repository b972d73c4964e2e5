"""A class graded on one broker (python3 -m grader --handlers DIR): batch.py finds the
submissions, grades each in a grader subprocess of its own and reports the class."""
