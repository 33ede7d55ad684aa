"""What a failed job tells the owner: what failed and what happens next, through the
real engine and gateway (hostile 19: "your message is saved and I will answer when
one is back", while failed runs are never run again)."""

from __future__ import annotations

import asyncio
from typing import Any

from sched_support import (  # noqa: F401 (fixture)
    CHAT,
    OWNER,
    FakeTelegram,
    T,
    engine_running,
    engine_yaml,
    gateway_running,
    history,
    klaw,
    telegram_fixture,
)

from klaw.paths import KlawPaths


async def test_a_job_no_model_answers_says_it_is_not_run_again_until_its_next_time(
    klaw_home: KlawPaths, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")  # nothing listens there
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    telegram.add_chat(OWNER)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw(
            "schedule", "add", "digest", "0 0 8 * * ?", "Summarize my inbox",
            "--inject-into", CHAT,
        )  # fmt: skip
        assert rc == 0, err
        rc, _, err = await klaw("schedule", "run", "digest")
        assert rc == 0, err
        (told,) = await telegram.wait_sent(OWNER, 1, T)
        (run,) = await history("digest")
    assert run["status"] == "failed" and "no model answered" in run["error"]
    text = told.visible
    assert text.startswith("⚠️ Scheduled job 'digest' failed: no model answered")
    assert "saved" not in text and "when one is back" not in text
    assert "This run is not repeated; the job runs again at its next time, " in text
    assert " 08:00 (Europe/Berlin)" in text  # "0 0 8 * * ?" in scheduler.timezone
