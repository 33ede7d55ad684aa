"""Klaw's scheduler: cron jobs, the heartbeat and subagents, run inside the engine.

- `cron`: the cron syntax (Quartz and crontab) and fire times;
- `jobs`: what a job is (data only, stored with it);
- `ledger`: the run ledger that makes each due time run at most once;
- `service`: APScheduler with its job store on scheduler.db, and Klaw's executor;
- `runner`: one run (pre-check, cap, subagent turn, silent or delivered);
- `outbox`: results kept until the gateway confirms them;
- `heartbeat`: HEARTBEAT.md → the `heartbeat` job;
- `control`: the checks shared by `klaw schedule` and the `schedule_*` tools.

See docs/scheduler.md.
"""
