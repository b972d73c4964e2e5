"""The grader's sandbox: everything that confines a submission's code while it is graded.

The trusted side (the grader) uses it; nothing here imports the grader.
submission.py is one submission's sandbox, root.py the root its programs see,
relay.py its network, cgroups.py its limits, rabbitadmin.py its vhost and user
on the grading broker.
"""

from .submission import (UID_BASE_ENV, Limits, Sandbox, Tampered, Unavailable,
                         enter_private_mounts, existing_group, new_group_name, unavailable_reason)

__all__ = ["UID_BASE_ENV", "Limits", "Sandbox", "Tampered", "Unavailable", "enter_private_mounts",
           "existing_group", "new_group_name", "unavailable_reason"]
