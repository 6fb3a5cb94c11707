"""Scheduled profiling: the schedule annotation, cron times, and planning (pure)."""
