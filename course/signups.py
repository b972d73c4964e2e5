"""The hub's sign-ups still waiting for the instructor, for the course's service (run in the hub).

    GET /hub/api/nightjar/waiting    {"waiting": [{"name", "email"}], "authorize": "/hub/authorize"}

NativeAuthenticator keeps its sign-ups in the hub's own database, which the hub's REST API does
not show; the class page lists them with the way to authorize them. Needs the scope list:users
(the course's service has it; so do the hub's admins).
"""

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from nativeauthenticator.orm import UserInfo


class Waiting(APIHandler):
    @needs_scope("list:users")
    def get(self):
        waiting = self.db.query(UserInfo).filter(UserInfo.is_authorized.is_(False)).order_by(UserInfo.username)
        self.finish({"waiting": [{"name": info.username, "email": info.email or None} for info in waiting],
                     "authorize": self.hub.base_url + "authorize"})


HANDLERS = [("/api/nightjar/waiting", Waiting)]
