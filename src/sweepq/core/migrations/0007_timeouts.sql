-- sweepq schema, version 7: a failure reason of its own for executions that ran past their
-- timeout (the `timeout` option and column come with version 5).

-- As in version 6: the new check only widens the old one, so NOT VALID skips a scan of the table.
ALTER TABLE {schema}.jobs
    DROP CONSTRAINT jobs_failure_reason_check,
    ADD CONSTRAINT jobs_failure_reason_check CHECK (
        failure_reason IN ('max_attempts_exceeded', 'deadline_exceeded', 'error', 'invalid_args',
                           'timeout')
    ) NOT VALID;
