"""CL-13-3: delivery state per subscriber, and resuming a job step by step.

Part 1 - fan-out.  One event goes to every subscriber (billing and mail).
Each (subscriber, event) pair has its own row, so one subscriber can be
done while another is still pending, and only the failed one is retried.
Publishing the same event again adds missing rows but never resets a row.

Part 2 - resume.  A job has two steps: charge, then ship.  Each step writes
its completion row together with its effect in ONE transaction.  Running
the job again skips the steps that are already completed, so the customer
is charged once however often the job is resumed.
"""

import sqlite3

SUBSCRIBERS = ("billing", "mail")   # every event goes to each of these
CHARGE_AMOUNT = 100

SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (   -- one row per subscriber and event
    subscriber TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'pending',   -- pending / done
    PRIMARY KEY (subscriber, event_id)
);
CREATE TABLE IF NOT EXISTS steps (        -- completed steps of each job
    job  TEXT NOT NULL,
    step TEXT NOT NULL,                   -- charge / ship
    PRIMARY KEY (job, step)
);
CREATE TABLE IF NOT EXISTS charges (      -- effect of the charge step
    job    TEXT PRIMARY KEY,
    amount INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS shipments (    -- effect of the ship step
    job TEXT PRIMARY KEY
);
"""


class Delivery:
    def __init__(self, path=":memory:"):
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)

    # ---- part 1: fan-out delivery ----------------------------------------

    def publish(self, event_id):
        """Register the event for every subscriber; keep rows that exist."""
        _check_name("event_id", event_id)
        with self.db:
            for subscriber in SUBSCRIBERS:
                # OR IGNORE: an existing row (maybe already 'done') stays as it is
                self.db.execute(
                    "INSERT OR IGNORE INTO deliveries (subscriber, event_id) VALUES (?, ?)",
                    (subscriber, event_id))
        self._print_deliveries(event_id)

    def consume(self, subscriber, event_id, fail=False):
        """One subscriber processes the event; fail=True simulates an error."""
        if subscriber not in SUBSCRIBERS:
            raise ValueError(f"unknown subscriber {subscriber!r}; use one of {SUBSCRIBERS}")
        _check_name("event_id", event_id)
        if not isinstance(fail, bool):
            raise TypeError(f"fail must be True or False, got {fail!r}")
        row = self.db.execute(
            "SELECT state FROM deliveries WHERE subscriber = ? AND event_id = ?",
            (subscriber, event_id)).fetchone()
        if row is None:
            raise ValueError(f"{event_id!r} was not published; call publish({event_id!r}) first")
        if fail:
            # Nothing is written: the row keeps its state and can be retried.
            print(f"{subscriber}: failed; {row[0]} retained")
            return
        with self.db:
            self.db.execute(
                "UPDATE deliveries SET state = 'done' WHERE subscriber = ? AND event_id = ?",
                (subscriber, event_id))
        self._print_deliveries(event_id)

    # ---- part 2: step-wise resume ----------------------------------------

    def run(self, job, ship_ok):
        """Run (or resume) a job: charge, then ship. ship_ok=False makes ship fail."""
        _check_name("job", job)
        if not isinstance(ship_ok, bool):
            raise TypeError(f"ship_ok must be True or False, got {ship_ok!r}")

        # Step 1: charge.  Skip it if its completion row exists.
        if self._completed(job, "charge"):
            print("charge=already_completed")
        else:
            with self.db:   # ONE transaction: the charge and its completion row
                self.db.execute("INSERT INTO charges (job, amount) VALUES (?, ?)",
                                (job, CHARGE_AMOUNT))
                self.db.execute("INSERT INTO steps (job, step) VALUES (?, 'charge')", (job,))
            print("charge=committed")

        # Step 2: ship.  The transcript reports a ship finished on an earlier
        # run as "ship=completed"; it is not shipped a second time.
        if self._completed(job, "ship"):
            print("ship=completed")
        elif not ship_ok:
            print("ship=failed")   # nothing written: the next run retries ship only
        else:
            with self.db:   # ONE transaction: the shipment and its completion row
                self.db.execute("INSERT INTO shipments (job) VALUES (?)", (job,))
                self.db.execute("INSERT INTO steps (job, step) VALUES (?, 'ship')", (job,))
            print("ship=completed")

    def status(self):
        """Print the completed steps (in the order they finished) and the charges."""
        steps = self.db.execute("SELECT job, step FROM steps ORDER BY job, rowid").fetchall()
        charges = self.db.execute("SELECT job, amount FROM charges ORDER BY job").fetchall()
        print(f"steps={steps}")
        print(f"charges={charges}")

    # ---- helpers ----------------------------------------------------------

    def _completed(self, job, step):
        return self.db.execute(
            "SELECT 1 FROM steps WHERE job = ? AND step = ?", (job, step)).fetchone() is not None

    def _print_deliveries(self, event_id):
        print(self.db.execute(
            "SELECT subscriber, event_id, state FROM deliveries"
            " WHERE event_id = ? ORDER BY subscriber", (event_id,)).fetchall())


def _check_name(what, value):
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
