"""CL-13-2: queue redelivery without double processing.

A small work queue kept in SQLite, driven by a fixed clock (it starts at 0
and only advance() moves it).  A job goes through three separate stages:

    receive()  the queue hands the job out with a receipt ("ID/attempt")
               and hides it for 10 seconds (the visibility timeout);
    apply()    the business update: add the job's amount to the balance;
    ack()      tell the queue the job is finished, so it is not sent again.

If the ack never arrives, the job becomes visible again and is delivered a
second time.  apply() stays safe because it writes the processed ID and the
new balance in ONE transaction: the ID's primary key refuses a second run.
A job received 3 times without an ack is moved to the dead-letter queue (DLQ).
"""

import sqlite3
from dataclasses import dataclass

VISIBILITY_TIMEOUT = 10   # seconds a received job stays hidden
MAX_ATTEMPTS = 3          # receives allowed before the job goes to the DLQ

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (          -- the queue: delivery state only
    id              TEXT PRIMARY KEY,
    amount          INTEGER NOT NULL,      -- the message body
    attempts        INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL DEFAULT 'queued',  -- queued/received/done/dlq
    invisible_until INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS processed (     -- business side: IDs already applied
    id     TEXT PRIMARY KEY,
    amount INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS account (       -- business side: one balance row
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    balance INTEGER NOT NULL
);
INSERT OR IGNORE INTO account (id, balance) VALUES (1, 0);
"""


@dataclass(frozen=True)
class Message:
    """What receive() hands out: the job's body plus this delivery's receipt."""
    id: str        # the job (event) ID: the same on every delivery
    amount: int
    attempt: int
    receipt: str   # "ID/attempt": names one delivery, used by ack()


class Queue:
    def __init__(self, path=":memory:"):
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        self.now = 0   # the fixed clock, in seconds

    def send(self, job_id, amount):
        """Put a new job on the queue."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job id must be a non-empty string, got {job_id!r}")
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"amount must be an int, got {amount!r}")
        try:
            with self.db:
                self.db.execute("INSERT INTO jobs (id, amount) VALUES (?, ?)", (job_id, amount))
        except sqlite3.IntegrityError:
            raise ValueError(f"job {job_id!r} is already on the queue; send it with a new id") from None
        print(f"queued={job_id}")

    def receive(self):
        """Hand out the oldest visible job, or return None."""
        row = self.db.execute(
            "SELECT id, amount, attempts FROM jobs"
            " WHERE state IN ('queued', 'received') AND invisible_until <= ?"
            " ORDER BY rowid LIMIT 1", (self.now,)).fetchone()
        if row is None:
            print("no_visible_message")
            return None
        job_id, amount, attempts = row
        if attempts >= MAX_ATTEMPTS:
            # Every attempt was used and none was acknowledged: stop retrying
            # and keep the job aside for investigation.  This is NOT success.
            with self.db:
                self.db.execute("UPDATE jobs SET state = 'dlq' WHERE id = ?", (job_id,))
            print(f"DLQ={job_id}")
            return None
        attempt = attempts + 1
        until = self.now + VISIBILITY_TIMEOUT
        with self.db:
            self.db.execute(
                "UPDATE jobs SET attempts = ?, state = 'received', invisible_until = ?"
                " WHERE id = ?", (attempt, until, job_id))
        message = Message(job_id, amount, attempt, f"{job_id}/{attempt}")
        print(f"id={job_id} attempt={attempt} receipt={message.receipt} invisible_until={until}")
        return message

    def apply(self, message):
        """Business update: add the amount to the balance, once per job ID."""
        self._check(message, "apply")
        if message.amount < 0:
            print("invalid_amount")   # nothing is written, so nothing to undo
            return
        try:
            with self.db:   # ONE transaction: both writes commit, or neither does
                self.db.execute("INSERT INTO processed (id, amount) VALUES (?, ?)",
                                (message.id, message.amount))   # fails if ID seen
                self.db.execute("UPDATE account SET balance = balance + ?", (message.amount,))
        except sqlite3.IntegrityError:
            # The ID is already in `processed`: this is a redelivery.
            (done_amount,) = self.db.execute(
                "SELECT amount FROM processed WHERE id = ?", (message.id,)).fetchone()
            if done_amount != message.amount:
                # Same ID, different content: the ID was reused. Refuse it.
                print(f"applied=False conflict=amount_mismatch processed={done_amount}"
                      f" got={message.amount} balance={self._balance()}")
            else:
                print(f"applied=False balance={self._balance()}")
            return
        print(f"applied=True balance={self._balance()}")

    def ack(self, message):
        """Tell the queue the job is finished. Only the newest receipt counts."""
        self._check(message, "ack")
        state, attempts = self.db.execute(
            "SELECT state, attempts FROM jobs WHERE id = ?", (message.id,)).fetchone()
        current = state == "received" and message.receipt == f"{message.id}/{attempts}"
        if current:
            with self.db:
                self.db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (message.id,))
        print(f"ack={current}")

    def advance(self, seconds):
        """Move the fixed clock forward."""
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
            raise ValueError(f"advance() needs a whole number of seconds >= 0, got {seconds!r}")
        self.now += seconds
        print(f"now={self.now}")

    def show(self):
        """Print the queue's rows and the processed IDs."""
        print(self.db.execute("SELECT id, attempts, state FROM jobs ORDER BY id").fetchall())
        print(f"processed={self.db.execute('SELECT id FROM processed ORDER BY id').fetchall()}")

    # ---- helpers ----------------------------------------------------------

    def _balance(self):
        return self.db.execute("SELECT balance FROM account").fetchone()[0]

    def _check(self, message, action):
        """Refuse anything that is not a Message for a job of this queue."""
        if message is None:
            raise TypeError(f"{action}() got None: receive() found no message to hand out")
        if not isinstance(message, Message):
            raise TypeError(f"{action}() needs a Message from receive(), got {message!r}")
        if self.db.execute("SELECT 1 FROM jobs WHERE id = ?", (message.id,)).fetchone() is None:
            raise ValueError(f"{action}(): unknown job {message.id!r}, it was never sent")
