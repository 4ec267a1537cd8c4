"""A Locust web UI with the LLM tab and a fake, time-varying snapshot: ``python fake_llm_webui.py PORT``.

Used by ``test_llm_tab_fake.py`` to drive the tab in chromium without the simulator or
the core's metrics; it runs in its own process because Locust monkey-patches with gevent.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gevent
import locust
from locust import User, constant, task
from locust.env import Environment

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the factory

from attnload.report.live import webui  # noqa: E402
from attnload.results.model import Results, Summary
from helpers.results import gqa_model, mla_model, results  # noqa: E402

TTFT_S = 0.050
STAGE_S = 5.0


class Idle(User):
    wait_time = constant(0.5)

    @task
    def tick(self) -> None:
        self.environment.events.request.fire(
            request_type="GET", name="/fake", response_time=5, response_length=0, exception=None, context={}
        )


def snapshot(environment: Environment, started: float) -> Results:
    """TTFT p50 fixed at 50 ms; tok/s grows with the running user count and time."""
    elapsed = time.monotonic() - started
    users = environment.runner.user_count if environment.runner else 0
    models = []
    for base in (gqa_model(), mla_model()):
        stage = base.stages[-1].model_copy(
            update={
                "index": int(elapsed // STAGE_S),  # a new stage every STAGE_S: the live charts mark each change
                "users": users,
                "ttft_s": Summary(count=10, p50=TTFT_S, p99=TTFT_S * 1.2, max=TTFT_S * 1.3),
                "output_tokens_per_s": 10.0 * users + elapsed,
                "errors": {},
            }
        )
        models.append(base.model_copy(update={"stages": [stage]}))
    return results(*models).model_copy(update={"duration_s": elapsed})


def main() -> None:
    port = int(sys.argv[1])
    sys.argv = ["locust"]
    env = Environment(user_classes=[Idle], events=locust.events)
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", port)
    started = time.monotonic()
    webui.install(env, lambda: snapshot(env, started))
    print("ready", flush=True)
    while True:
        gevent.sleep(1)


if __name__ == "__main__":
    main()
