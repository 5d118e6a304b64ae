-- sweepq sweeps, version 2: a run's leaves are a job group of the core (counted, cancelled and
-- retried through the core's own index); the index version 1 made over the core's jobs goes.
DROP INDEX IF EXISTS {schema}.jobs_sweep_outstanding;
