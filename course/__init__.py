"""A course on JupyterHub: every learner's lab behind the hub's login (docs/instructors/run-a-course.md)."""
