"""The locustfile: ``attnload run`` starts this file and ``locustfiles/chat.py`` imports it for plain
``locust -f``. An entry point like the commands, so it may hand the runner the simulator's preset
facts (KV bytes/token, capacity) for the results; the runner itself never imports the simulator."""

from locust import events

from attnload.runner.events import register
from attnload.runner.sender.users import ChatUser
from attnload.runner.shape import shape_class
from attnload.sim.costmodel import attention_info, gpu_bandwidth_gbps

register(
    events, attention_facts=attention_info, gpu_bandwidth=gpu_bandwidth_gbps
)  # init: validate config (exit 2), /metrics, deltas from workers


class Chat(ChatUser):
    """Models, profiles and weights come from ATTNLOAD_CONFIG; nothing else here."""


Shape = shape_class()  # ATTNLOAD_SHAPE (e.g. concurrency:8,32) or None: Locust's own controls
