# Hostile: reads /proc for its grader's command line and environment (and every other
# process's) and raises with them, so they land in the report.
import os


def handle(ch, delivery, job, db, pause):
    found = []
    for pid in [str(os.getppid()), "1"] + os.listdir("/proc"):
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as file:
                    found.append(file.read(300).replace(b"\0", b" ").decode(errors="replace"))
            except OSError as error:
                found.append(f"{pid}/{part}: {type(error).__name__}")
    raise RuntimeError(" | ".join(found))
