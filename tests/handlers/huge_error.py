# Wrong: always raises, with a 10 MB message the grader must shorten.
def handle(ch, delivery, job, db, pause):
    raise ValueError('ticket printer jammed ' + 'x' * 10_000_000)
