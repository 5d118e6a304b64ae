-- sweepq schema, version 8: cron schedules in a time zone.

-- The IANA name of the zone a schedule's ticks are computed in (the leader computes them; the
-- ticks themselves stay UTC instants in next_run_at and last_run_at). Kept with the row so that
-- a schedule whose zone changed starts over from the new zone's next tick, as one whose
-- expression changed does. Existing schedules were computed in UTC.
ALTER TABLE {schema}.cron_schedules ADD COLUMN tz text NOT NULL DEFAULT 'UTC';
