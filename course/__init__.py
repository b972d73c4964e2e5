"""A course on JupyterHub: every learner's lab behind the hub's login (README, "Hosting the lab for a course")."""
