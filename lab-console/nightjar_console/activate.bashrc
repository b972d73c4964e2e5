# The lab console's shell under make local (agent.py): the learner's own ~/.bashrc first,
# then the lab's virtual environment, so `python3` is the lab's Python.
[ -f ~/.bashrc ] && . ~/.bashrc
. "$VIRTUAL_ENV/bin/activate"
