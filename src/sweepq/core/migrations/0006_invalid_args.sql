-- sweepq schema, version 6: a failure reason of its own for stored args that do not fit the
-- handler (a job enqueued through SQL, or by an older version of the task, with other args).

-- The new check only widens the old one, which every existing row passed: NOT VALID skips a
-- scan of the whole table under this migration's lock, and new and updated rows are checked.
ALTER TABLE {schema}.jobs
    DROP CONSTRAINT jobs_failure_reason_check,
    ADD CONSTRAINT jobs_failure_reason_check CHECK (
        failure_reason IN ('max_attempts_exceeded', 'deadline_exceeded', 'error', 'invalid_args')
    ) NOT VALID;
