"""The lab console: the whole lab in one browser page (python3 -m nightjar_console).

One page holds the unit's guide (ja/en), the Workstation's terminal (a real
PTY running bash inside the Workstation), an editor for handler.py, a Check
button per unit and a Grade button. The console is a shell in the learner's
browser, so it is guarded as Jupyter's is: a random token in the URL it
prints, kept in its data folder, required by the page, every API call and
the websocket; foreign Origins refused; 127.0.0.1 only on the host.

The parts:
  app.py       the web server (Tornado): its routes and the page
  guarded.py   what every request passes: the token, the Origin, the API's JSON errors
  units.py     the units' API: guides, setup, check and solve
  editor.py    the editor's handler.py: open and save
  terminal.py  the terminal's websocket, relayed to the agent
  access.py    the token, the cookie it becomes, and the Origin rule
  agent.py     runs inside the Workstation: bash on a PTY and the unit scripts,
               over a Unix socket only the console shares (standard library only)
  agentlink.py the console's side of that socket
  guides.py    the units' guides as HTML, as the console shows them (its own column, no host-only block)
  solutions.py a unit's solution beside the learner's handler.py (off with NIGHTJAR_CONSOLE_SOLUTIONS=off)
  grading.py   Grade: the grading service's answer (containers) or the local grader
  progress.py  which units passed their check, kept in the console's data folder
"""
