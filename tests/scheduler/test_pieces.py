"""The scheduler's pieces on hostile input: silent replies, pre-checks that hang,
hog memory or flood output, HEARTBEAT.md variants, job fields and config keys, the
run ledger, and outbox files that are damaged or refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from klaw.config import load_engine_config
from klaw.errors import ConfigError, KlawError
from klaw.scheduler.heartbeat import heartbeat_spec
from klaw.scheduler.jobs import JobError, JobSpec
from klaw.scheduler.ledger import Ledger
from klaw.scheduler.outbox import Outbox
from klaw.scheduler.precheck import run_precheck
from klaw.scheduler.runner import is_silent
from klaw.wire.protocol import ErrorCode, Outbound


@pytest.mark.parametrize(
    ("text", "silent"),
    [
        ('{"silent": true, "reason": "nothing"}', True),
        ('  {"silent": true}\n', True),
        ('```json\n{"silent": true, "reason": "x"}\n```', True),
        ('```\n{"silent": true}\n```', True),
        ('{"silent": false}', False),
        ('{"silent": "true"}', False),  # a string is not true
        ('{"silent": 1}', False),
        ("[{}]", False),
        ('Nothing to report. {"silent": true}', False),  # text around it: tell the owner
        ('{"silent": true', False),  # torn JSON
        ("", False),
        ("Your card expires Friday.", False),
        ('{"silent": true} {"silent": true}', False),
    ],
)
def test_only_a_silent_object_is_silent(text: str, silent: bool) -> None:
    assert is_silent(text) is silent


def test_pre_check_exit_status_decides(tmp_path: Path) -> None:
    assert run_precheck("exit 0", tmp_path).wake
    quiet = run_precheck("exit 1", tmp_path)
    assert not quiet.wake and quiet.error is None
    nothing = run_precheck("grep -q bank /dev/null", tmp_path)
    assert not nothing.wake and nothing.error is None
    crashed = run_precheck("echo 'Traceback: boom' >&2; exit 1", tmp_path)
    assert crashed.error == "the pre-check exited with status 1: Traceback: boom"
    bad = run_precheck("echo 'no route to host' >&2; exit 7", tmp_path)
    assert not bad.wake and bad.error == "the pre-check exited with status 7: no route to host"
    missing = run_precheck("/no/such/tool --check", tmp_path)
    assert missing.error is not None and "status 127" in missing.error
    # It runs in the workspace, with a bare environment (no secrets from the engine's).
    (tmp_path / "flag").write_text("x")
    assert run_precheck('test -e flag && test -z "$TELEGRAM_BOT_TOKEN"', tmp_path).wake


def test_a_hanging_pre_check_is_killed_with_its_children(tmp_path: Path) -> None:
    started = time.monotonic()
    got = run_precheck("sleep 300 & sleep 300; wait", tmp_path, timeout=1)
    assert got.error == "the pre-check ran over 1 s and was killed"
    assert time.monotonic() - started < 60  # the background child did not keep it alive


@pytest.mark.parametrize(("status", "wake"), [(0, True), (3, False)])
def test_a_pre_check_is_over_when_its_shell_exits_and_leaves_nothing_behind(
    tmp_path: Path, status: int, wake: bool
) -> None:
    # A child that leaves the check's session (setsid) and holds its stderr open: the
    # exit status counts at once, and the child is killed with the check (hostile 15:
    # the job stayed running for 75 s, then was reported as killed).
    escape = "setsid sh -c 'echo $$ > escaped; exec sleep 75' &"
    check = f"{escape} while [ ! -s escaped ]; do sleep 0.01; done; exit {status}"
    started = time.monotonic()
    got = run_precheck(check, tmp_path, timeout=60)
    assert got.wake is wake
    assert got.error == (None if wake else "the pre-check exited with status 3")
    assert time.monotonic() - started < 60  # not held until the sleep ends
    pid = int((tmp_path / "escaped").read_text())
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped before the result


def test_a_pre_check_that_hogs_memory_or_floods_output_is_contained(tmp_path: Path) -> None:
    hog = run_precheck("python3 -c 'x = bytearray(4 << 30)'", tmp_path)
    assert not hog.wake and hog.error is not None and "MemoryError" in hog.error
    flood = run_precheck("yes 'spam' | head -c 50000000 >&2; exit 2", tmp_path)
    assert flood.error is not None and len(flood.error) < 5000


def _config(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    return load_engine_config(path)


def test_heartbeat_file_variants(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "scheduler:\n  heartbeat:\n    injectInto: telegram_1\n")
    assert heartbeat_spec(None, cfg, "UTC") is None
    assert heartbeat_spec("", cfg, "UTC") is None
    assert heartbeat_spec("# Heartbeat\n\n<!-- add checks here -->\n## Later\n", cfg, "UTC") is None
    spec = heartbeat_spec("# Checks\n- mail\n", cfg, "UTC")
    assert spec is not None and spec.kind == "heartbeat" and spec.cron == "0 0 * * * ?"
    assert spec.inject_into == "telegram_1" and "- mail" in spec.message
    assert '{"silent": true' in spec.message
    with pytest.raises(JobError, match=r"HEARTBEAT\.md has 30000 characters"):
        heartbeat_spec("- " + "x" * 29998, cfg, "UTC")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("scheduler:\n  timezone: Mars/Olympus\n", "scheduler.timezone"),
        ("scheduler:\n  heartbeat:\n    cron: '0 0 * * * MON'\n", "scheduler.heartbeat.cron"),
        ("scheduler:\n  catchUpHours: 0\n", "scheduler.catchUpHours"),
        ("scheduler:\n  heartbeat:\n    dailyTokenCap: -5\n", "scheduler.heartbeat.dailyTokenCap"),
        ("scheduler:\n  heartbat: {}\n", "scheduler.heartbat: unknown key"),
    ],
)
def test_bad_scheduler_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, text)
    assert key in str(err.value)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"name": "-x"}, "job name '-x'"),
        ({"name": "a" * 65}, "job name"),
        ({"message": "  "}, "the message is empty"),
        ({"message": "x" * 20_001}, "20001 characters"),
        ({"inject_into": "telegram"}, "injectInto 'telegram'"),
        ({"cron": "0 0 * * * * * *"}, "has 8 fields"),
        ({"timezone": "Nowhere/City"}, "unknown time zone"),
        ({"daily_token_cap": 0}, "dailyTokenCap"),
        ({"daily_token_cap": True}, "dailyTokenCap"),
        ({"precheck": " "}, "pre-check"),
    ],
)
def test_job_fields_are_checked(fields: dict[str, object], expected: str) -> None:
    base: dict[str, object] = {
        "name": "job",
        "cron": "0 8 * * *",
        "message": "m",
        "timezone": "UTC",
    }
    with pytest.raises(JobError, match=expected.replace("(", r"\(")):
        JobSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_job_data_round_trips_and_ignores_unknown_fields() -> None:
    spec = JobSpec(name="j", cron="0 8 * * *", message="m", timezone="UTC", daily_token_cap=5)
    assert JobSpec.from_data({**spec.to_data(), "from_a_newer_klaw": 1}) == spec


def test_the_ledger_claims_once_and_keeps_state_across_reopen(tmp_path: Path) -> None:
    db = tmp_path / "scheduler.db"
    due = datetime(2026, 3, 1, 8, tzinfo=UTC)
    ledger = Ledger(db)
    assert ledger.claim("j", due) and not ledger.claim("j", due)
    assert ledger.start("j", due) and not ledger.start("j", due)
    ledger.finish("j", due, "ok", tokens_in=100, tokens_out=20)
    assert not ledger.record("j", due, "missed")  # that due time has its row
    with pytest.raises(ValueError, match="not a final status"):
        ledger.finish("j", due, "running")
    assert ledger.set_failing("j", True) and not ledger.set_failing("j", True)
    assert ledger.mark_capped("j", "2026-03-01") and not ledger.mark_capped("j", "2026-03-01")
    ledger.close()
    again = Ledger(db)
    assert again.tokens_between("j", due - timedelta(hours=8), due + timedelta(hours=16)) == 120
    assert again.tokens_between("j", due + timedelta(hours=1), due + timedelta(days=1)) == 0
    (run,) = again.history("j")
    assert (run.status, run.tokens_in, run.tokens_out) == ("ok", 100, 20)
    assert again.set_failing("j", False) and again.set_failing("j", True) is not False
    assert again.unfinished() == ([], [])
    again.close()


class _Refusing(KlawError):
    code = ErrorCode.REFUSED


async def test_outbox_sets_aside_damaged_and_refused_pushes_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    sent: list[str] = []
    up = asyncio.Event()

    async def deliver(out: Outbound) -> None:
        if out.chat_id == "telegram_666":
            raise _Refusing("not allowed")
        if not up.is_set():
            raise KlawError("no gateway connected")
        sent.append(out.content)

    box = Outbox(tmp_path / "outbox", deliver)
    (tmp_path / "outbox").mkdir()
    (tmp_path / "outbox" / "00000000000000000001-torn.json").write_bytes(b'{"type": "outb')
    assert not await box.send(Outbound(channel="telegram", chat_id="telegram_1", content="a"))
    assert not await box.send(Outbound(channel="telegram", chat_id="telegram_666", content="b"))
    assert not await box.send(Outbound(channel="telegram", chat_id="telegram_1", content="c"))
    aside = tmp_path / "outbox" / "damaged"
    assert sent == [] and len(box.pending()) == 3 and len(list(aside.iterdir())) == 1
    up.set()  # the gateway is back: the refused one is set aside, the others go in order
    assert await box.flush() == 2
    assert sent == ["a", "c"] and box.pending() == []
    assert len(list((tmp_path / "outbox" / "refused").iterdir())) == 1
