"""The worker's runtime: what ticket-desk/worker.py and desk.py run on (options, the session, the pause, the delivery history's recorder, the desk commands)."""
