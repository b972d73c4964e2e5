# Wrong: prints the checkpoint's line itself instead of calling checkpoint(),
# so an interruption "at before-write" really comes after the ack and the return.
def handle(ch, delivery, job, db, pause):
    with db:
        db.execute('INSERT OR IGNORE INTO completed VALUES (?)', (job['id'],))
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    ch.basic_ack(delivery.delivery_tag)
    print('Paused before-write.', flush=True)
    print('Paused inside-transaction.', flush=True)
    print('Paused after-commit.', flush=True)
