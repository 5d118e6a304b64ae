-- sweepq schema, version 10: jobs that kill their workers, jobs for tasks a worker does not know.

-- How many workers died while running the job (their leases lapsed with none of their
-- connections open), since it last ran to an end under a live worker: job_rescue counts them,
-- job_claim runs a job that has one alone among a worker's suspects, and a second death fails
-- it `worker_died` instead of taking down more workers. Existing jobs start at 0.
ALTER TABLE {schema}.jobs ADD COLUMN crashes integer NOT NULL DEFAULT 0;
-- How many times in a row a worker with no handler for the job's task handed it back (a rolling
-- deploy: an older worker met a task the newer code added); the tenth fails it `unknown_task`.
ALTER TABLE {schema}.jobs ADD COLUMN handbacks integer NOT NULL DEFAULT 0;

-- As in versions 6 and 7: the new check only widens the old one, so NOT VALID skips a scan.
ALTER TABLE {schema}.jobs
    DROP CONSTRAINT jobs_failure_reason_check,
    ADD CONSTRAINT jobs_failure_reason_check CHECK (
        failure_reason IN ('max_attempts_exceeded', 'deadline_exceeded', 'error', 'invalid_args',
                           'timeout', 'worker_died', 'unknown_task')
    ) NOT VALID;
