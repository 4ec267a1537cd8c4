"""`locust -f locustfiles/chat.py`, plus --master/--worker to distribute; config from ATTNLOAD_CONFIG."""

from locust import events

from attnload.users import ChatUser, register, shape_class

register(events)  # init: validate config (exit 2), /metrics on master, deltas from workers


class Chat(ChatUser):
    """Models, profiles and weights come from ATTNLOAD_CONFIG; nothing else here."""


Shape = shape_class()  # ATTNLOAD_SHAPE (e.g. concurrency:8,32) or None: Locust's own controls
