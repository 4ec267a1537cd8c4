"""`locust -f locustfiles/chat.py`, plus --master/--worker to distribute; config from ATTNLOAD_CONFIG.

The user, the shape and the event wiring are the packaged locustfile's (the one `attnload run`
starts), so plain Locust and `attnload run` measure alike; Locust finds the classes imported here.
"""

from attnload.commands.locustfile import Chat, Shape

__all__ = ["Chat", "Shape"]
