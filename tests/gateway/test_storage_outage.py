"""The gateway's disk fills up (a real tmpfs, full): Telegram updates are not
acknowledged until they are stored, the chat is told once, and nothing is lost."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_telegram import FakeTelegram

from engine_harness import CHAT, OWNER, T, gateway_running, log_lines
from klaw.gateway.channels.base import STORAGE_NOTICE
from klaw.paths import KlawPaths

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def full_disk(where: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs at `where`, then filled to the last byte; yields the filler."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)], check=True)
    try:
        filler = where / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * 4096):
                    pass
        finally:
            os.close(fd)
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_updates_wait_at_telegram_while_the_disk_is_full(
    klaw_home: KlawPaths, fake_telegram: FakeTelegram
) -> None:
    fake = fake_telegram
    fake.add_chat(OWNER)
    with full_disk(klaw_home.data_dir) as filler:
        async with gateway_running(klaw_home, fake):
            fake.text(OWNER, "first, while the disk is full")
            fake.text(OWNER, "second, while the disk is full")
            queued = list(fake.pending)
            assert len(queued) == 2
            (notice,) = await fake.wait_sent(OWNER, 1, T)
            assert notice.text == STORAGE_NOTICE
            # Fetched again and again, never acknowledged: both stay with Telegram.
            await fake.wait_for(lambda: len(fake.calls_of("getUpdates")) >= 4, T)
            assert fake.pending == queued
            assert not (klaw_home.conversations / CHAT).exists() or log_lines(klaw_home) == []

            filler.unlink()  # the owner frees some space
            await fake.wait_for(lambda: fake.pending == [], T)
            await fake.wait_for(lambda: len(log_lines(klaw_home)) == 2, T)
            assert [r["content"] for r in log_lines(klaw_home)] == [
                "first, while the disk is full",
                "second, while the disk is full",
            ]
            assert len(fake.sent_to(OWNER)) == 1  # told once per outage
