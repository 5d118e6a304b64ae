-- The roles of a sweepq schema (the ops guide, "Roles"). Run as a superuser, or a role with
-- CREATEROLE; tests/test_roles.py runs this very file, with names of its own.

-- The owner: owns the schema and everything in it, and migrations run as it (`sweepq migrate`
-- with its DSN). It should not be a superuser: the enqueue function runs as its owner.
CREATE ROLE sweepq_owner LOGIN;
CREATE SCHEMA sweepq AUTHORIZATION sweepq_owner;

-- Workers, and the programs that enqueue from Python, wait for jobs, run sweeps and steer them
-- (retry, cancel, close groups, prune): the rows of every table and every function; no DDL.
-- job_groups among them: closing a group writes its row, workers fire it, retention prunes it.
CREATE ROLE sweepq_worker LOGIN;
GRANT USAGE ON SCHEMA sweepq TO sweepq_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE sweepq_owner IN SCHEMA sweepq
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO sweepq_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE sweepq_owner IN SCHEMA sweepq
    GRANT USAGE, SELECT ON SEQUENCES TO sweepq_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE sweepq_owner IN SCHEMA sweepq
    GRANT EXECUTE ON FUNCTIONS TO sweepq_worker;

-- Dashboards and people who look (`sweepq top`, `doctor`, `jobs list|show`, `sweep status`):
-- every table, read only, jobs' args, results, errors and closed groups included.
CREATE ROLE sweepq_observer LOGIN;
GRANT USAGE ON SCHEMA sweepq TO sweepq_observer;
ALTER DEFAULT PRIVILEGES FOR ROLE sweepq_owner IN SCHEMA sweepq
    GRANT SELECT ON TABLES TO sweepq_observer;

-- Other services that only enqueue, from any driver: the SQL enqueue function and nothing else
-- (it checks every job as App.enqueue does); the role can neither read nor write a table. It
-- needs no grant on job_groups either: the jobs table's trigger that refuses jobs of a closed
-- group (and records the groups it admits) runs as the owner.
CREATE ROLE sweepq_enqueue LOGIN;
GRANT USAGE ON SCHEMA sweepq TO sweepq_enqueue;

-- --8<-- [start:after-migrate]
-- Once `sweepq migrate` has run as sweepq_owner: the function exists to be granted. (A later
-- migration that replaces it keeps the grant; tables and functions a later migration adds get
-- the default privileges above.)
GRANT EXECUTE ON FUNCTION sweepq.enqueue(text, jsonb, jsonb) TO sweepq_enqueue;
-- --8<-- [end:after-migrate]
