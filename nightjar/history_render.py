"""A registration's delivery story told for people, from the delivery history: `desk.py history` and the site's timeline.

Each delivery becomes its number, its time since the registration's first
delivery, RabbitMQ's redelivered flag and its steps in order, e.g.

    +0.0 s   delivery 1  redelivered=False  paused at before-write  stopped by Ctrl+C (not acknowledged)
    +31.2 s  delivery 2  redelivered=True   ticket 5 committed  acked

A long story (a message failing again and again) shows its first and last
deliveries and one summary line for those in between.
"""

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import history, registrations
from .events import SETTLING

SHOWN_FIRST, SHOWN_LAST = 3, 4   # a story longer than both together is summarised in between


@dataclass
class Step:
    kind: str     # the history's event, or "committed", "no-word", "open"
    text: str     # as desk.py history prints it: "paused at before-write"
    label: str    # as the picture shows it: "Paused at before-write"


@dataclass
class Told:
    """One delivery as told."""

    number: int
    offset: float            # seconds since the registration's first delivery
    redelivered: bool
    steps: list
    open: bool = False       # no word yet, and RabbitMQ has not delivered it again
    is_gap = False

    @property
    def when(self):
        return when(self.offset)

    @property
    def ending(self):
        return self.steps[-1].text if self.steps else "no step recorded"

    @property
    def rows(self):
        """The picture's rows, (kind, label): each step, and a last one when it ended unacknowledged."""
        rows = [(step.kind, step.label) for step in self.steps]
        if any(step.text.endswith("(not acknowledged)") for step in self.steps):
            rows.append(("unacked", "Not acknowledged"))
        return rows

    @property
    def text(self):
        """The delivery on one line, as the page's text version shows it."""
        return " · ".join([self.when, f"delivery {self.number}", f"redelivered={self.redelivered}",
                           *(step.text for step in self.steps)])


@dataclass
class Gap:
    """Deliveries left out of a long story, summarised on one line."""

    first: int
    last: int
    start: float
    end: float
    summary: str
    is_gap = True

    @property
    def count(self):
        return self.last - self.first + 1

    @property
    def text(self):
        return f"… {self.summary}"

    @property
    def span(self):
        return f"{when(self.start)} to {when(self.end)}"

    @property
    def when(self):
        return "…"


@dataclass
class Story:
    registration: registrations.Registration
    shown: list = field(default_factory=list)      # Told and (at most one) Gap, in order
    deliveries: int = 0                             # all of them, the trimmed ones too
    trimmed: int = 0                                # earlier deliveries the history no longer keeps
    older_tickets: list = field(default_factory=list)  # tickets no delivery in the history wrote
    damaged: int = 0

    @property
    def open(self):
        return any(isinstance(item, Told) and item.open for item in self.shown)

    @property
    def longest(self):
        """The most rows of one delivery in the picture."""
        return max([len(item.rows) for item in self.shown if isinstance(item, Told)] + [1])

    def lines(self):
        """The story as desk.py history prints it (no header, no notes)."""
        told = [item for item in self.shown if isinstance(item, Told)]
        width = max([len(item.when) for item in self.shown] + [0])
        number_width = max([len(f"delivery {item.number}") for item in told] + [0])
        lines = []
        for item in self.shown:
            if isinstance(item, Gap):
                lines.append(f"{item.when:<{width}}  {item.summary}")
                continue
            flag = f"redelivered={item.redelivered}"
            parts = [f"{item.when:<{width}}", f"{'delivery ' + str(item.number):<{number_width}}",
                     f"{flag:<17}", *(step.text for step in item.steps or [Step("", "no step recorded", "")])]
            lines.append("  ".join(parts))
        return lines

    def notes(self):
        """What the reader should know besides the lines: bounds, older tickets, damaged records."""
        found = []
        if self.trimmed:
            found.append(f"{deliveries_phrase(self.trimmed, 'earlier delivery')} not kept: the history"
                         f" keeps the last {history.PER_REGISTRATION} deliveries of each registration"
                         f" and the last {history.OVERALL} in all.")
        if self.older_tickets:
            found.append(f"{registrations.tickets_phrase(self.older_tickets).capitalize()}: written"
                         " before the first delivery in this history.")
        if self.damaged:
            found.append(f"{deliveries_phrase(self.damaged, 'damaged record')} in the history"
                         " skipped.")
        return found


def when(offset):
    return f"+{offset:.1f} s"


def deliveries_phrase(n, word="delivery"):
    """'no delivery', '1 delivery', '2 deliveries' (word: e.g. 'damaged record')."""
    if n == 0:
        return f"no {word}"
    plural = word[:-1] + "ies" if word.endswith("y") else word + "s"
    return f"{n} {word if n == 1 else plural}"


def ticket_text(numbers, existing):
    """'ticket 5 committed', 'tickets 5, 6 committed (6 deleted since)'."""
    gone = [n for n in numbers if n not in existing]
    text = registrations.tickets_phrase(numbers) + " committed"
    if gone:
        text += " (deleted since)" if len(gone) == len(numbers) else (
            f" ({', '.join(map(str, gone))} deleted since)")
    return text


def committed(numbers, existing):
    """The step for tickets a delivery committed (existing: the numbers still in the database)."""
    label = registrations.tickets_phrase(numbers).capitalize() + " written"
    return Step("committed", ticket_text(numbers, existing), label)


def tell(delivery, following, existing):
    """A history.Delivery's steps as (steps, open); following: the registration's next delivery or None."""
    steps, settled = [], False
    for record in delivery.steps:
        if record.get("committed"):
            steps.append(committed(record["committed"], existing))
        step = _step(record)
        if step is not None:
            steps.append(step)
        settled = settled or record["event"] in SETTLING
    if delivery.ended:
        stop = next((s for s in reversed(steps)
                     if s.kind in ("raised", "interrupted", "connection-lost")), None)
        if stop is not None and not settled:
            stop.text += " (not acknowledged)"
        return steps, False
    # No word on how it ended: the worker was killed (or is still at it).
    reported = {n for record in delivery.steps for n in record.get("committed", [])}
    later = sorted(n for n in existing if n > delivery.after and n not in reported
                   and (following is None or n <= following.after))
    if later:
        steps.append(committed(later, existing))
    if settled:
        steps.append(Step("no-word", "ended without a word from the worker", "No word from the worker"))
        return steps, False
    if following is not None and following.redelivered:
        steps.append(Step("no-word", "ended without a word from the worker (RabbitMQ delivered it"
                          " again)", "No word from the worker"))
        return steps, False
    steps.append(Step("open", "still open: no word from the worker yet", "Still open"))
    return steps, True


def _step(record):
    kind = record["event"]
    if kind == "paused":
        return Step(kind, f"paused at {record.get('point')}", f"Paused at {record.get('point')}")
    if kind == "ack":
        return Step(kind, "acked", "Acknowledged")
    if kind in ("nack", "reject"):
        verb = "nacked" if kind == "nack" else "rejected"
        where = "back to the queue" if record.get("requeue", True) else "to the dead-letter queue"
        return Step(kind, f"{verb} ({where})", f"{verb.capitalize()} ({where})")
    if kind == "double-ack":
        return Step(kind, "acked twice (refused)", "Acknowledged twice")
    if kind == "raised":
        where = record.get("where") or ""
        line = f" at handler.py line {where.split(':')[-1]}" if where else ""
        return Step(kind, f"handle() raised {record.get('type')}{line}",
                    f"Raised {record.get('type')}" + (f" (line {where.split(':')[-1]})" if where else ""))
    if kind == "interrupted":
        return Step(kind, "stopped by Ctrl+C", "Stopped by Ctrl+C")
    if kind == "connection-lost":
        return Step(kind, "connection to RabbitMQ lost", "Connection lost")
    if kind == "no-ack":
        return Step(kind, "handle() returned without acknowledging", "Returned, no ack")
    if kind == "transaction-open":
        return Step(kind, "left a transaction open (rolled back)", "Transaction rolled back")
    if kind == "pause-not-reached":
        return Step(kind, f"never reached checkpoint {record.get('point')}", "Checkpoint not reached")
    return None  # returned: the steps before it say how it went


def summarise(items):
    """One line for the deliveries a long story leaves out."""
    flags = Counter(item.redelivered for item in items)
    endings = Counter(item.ending for item in items)
    parts = [f"redelivered={flag} {count}" for flag, count in sorted(flags.items())]
    parts += [f"{count} × {ending}" for ending, count in endings.most_common()]
    return (f"deliveries {items[0].number} to {items[-1].number} ({len(items)}, {items[0].when} to"
            f" {items[-1].when}): " + "; ".join(parts))


def story(registration, stored):
    """The Story of a registration (with its tickets) from a history.History."""
    deliveries = stored.of(registration.id)
    trimmed = stored.trimmed.get(registration.id)
    skipped = trimmed.deliveries if trimmed else 0
    existing = {t.number for t in registration.tickets}
    told = []
    if deliveries:
        start = trimmed.since if trimmed else deliveries[0].time
        for index, delivery in enumerate(deliveries):
            following = deliveries[index + 1] if index + 1 < len(deliveries) else None
            steps, still_open = tell(delivery, following, existing)
            told.append(Told(skipped + index + 1, max(0.0, delivery.time - start),
                             delivery.redelivered, steps, still_open))
    shown = told
    if len(told) > SHOWN_FIRST + SHOWN_LAST + 1:
        middle = told[SHOWN_FIRST:-SHOWN_LAST]
        shown = [*told[:SHOWN_FIRST],
                 Gap(middle[0].number, middle[-1].number, middle[0].offset, middle[-1].offset,
                     summarise(middle)),
                 *told[-SHOWN_LAST:]]
    older = []
    if deliveries and not skipped:  # which tickets came before the first delivery we know of
        older = [t for t in registration.tickets if t.number <= deliveries[0].after]
    return Story(registration, shown, skipped + len(deliveries), skipped, older, stored.damaged)


PICTURE = Path(__file__).with_name("timeline.svg.jinja")
PICTURE_STYLE = Path(__file__).with_name("timeline.css")


@functools.cache
def _picture_template():
    import jinja2  # only the pictures need it: desk.py and the worker start without it
    return jinja2.Environment(autoescape=True).from_string(PICTURE.read_text(encoding="utf-8"))


def picture(told, registration_id):
    """The Story as its SVG timeline (HTML markup, every value escaped): the site's registration
    page and the course's close-up of a learner draw the same."""
    import markupsafe
    return markupsafe.Markup(_picture_template().render(story=told, registration_id=registration_id,
                                                        ids=f"timeline-{registration_id}"))
