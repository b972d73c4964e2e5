# Hostile: reads files outside its folder (a secret beside the class, the checkout,
# the grader's home) and raises with what it found, so it lands in the report.
def handle(ch, delivery, job, db, pause):
    found = []
    for path in ("__SECRET__", "__CHECKOUT__/README.md", "/root/.bash_history", "/etc/shadow",
                 "__CLASS__/../secret.txt"):
        try:
            with open(path) as file:
                found.append(file.read(200))
        except OSError as error:
            found.append(f"{path}: {type(error).__name__}")
    raise RuntimeError(" | ".join(found))
