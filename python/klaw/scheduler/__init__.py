"""Klaw's scheduler: cron jobs, the heartbeat and background work, run by the engine.

So far: `klaw.scheduler.cron`, the cron syntax (Quartz and crontab) as APScheduler
triggers. The job store and the runner are still to come (docs/scheduler.md).
"""
