-- +goose Up
-- The append-only history (run_events, attempt_logs, attempt_log_chunks)
-- becomes tables partitioned by day of created_at (UTC), so that a day of
-- history goes with one DROP TABLE of its partition instead of a DELETE of
-- its rows. A partition covers [day 00:00 UTC, next day 00:00 UTC) and is
-- named <table>_pYYYYMMDD; <table>_default takes the rows no partition
-- covers, so that an insert never fails when the partitions were not made
-- in time. The store's History repository makes the coming days'
-- partitions and drops old ones (EnsurePartitions, DropPartitionsBefore);
-- this migration makes one for each day its rows fall in and for today and
-- the next three days, and copies the rows, in its transaction: writers of
-- the three tables wait for it.
--
-- Columns and defaults stay; the sequences stay, so run_events ids keep
-- growing across partitions ("id > last" reads every partition), and so do
-- log chunks' seqs. A unique index of a partitioned table must hold the
-- partition key: the primary keys become (id, created_at), (attempt_id,
-- created_at) and (attempt_id, seq, created_at). The store keeps one row
-- where one is meant without them: ids and seqs come from their sequences
-- (a marker takes the seq of a chunk it deletes, in the transaction that
-- deletes it), and an attempt's attempt_logs row is inserted only while
-- none exists, under the attempt's row lock (recordFinal).
--
-- The log tables lose their foreign keys to attempts: a partition's DDL
-- would lock attempts with them (creating or detaching a partition takes
-- attempts' SHARE ROW EXCLUSIVE lock, dropping a detached one its ACCESS
-- EXCLUSIVE lock), and the cascade would probe every partition once per
-- deleted attempt. The store writes a log row only for an attempt it
-- locked, and the delete of a run deletes its attempts' logs with them.
ALTER TABLE run_events RENAME TO run_events_unpartitioned;
ALTER TABLE run_events_unpartitioned RENAME CONSTRAINT run_events_pkey TO run_events_unpartitioned_pkey;
ALTER INDEX run_events_run RENAME TO run_events_unpartitioned_run;
ALTER INDEX run_events_scope RENAME TO run_events_unpartitioned_scope;
CREATE TABLE run_events (
    id          bigint      NOT NULL DEFAULT nextval('run_events_id_seq'),
    project     text        NOT NULL,
    domain      text        NOT NULL,
    run_name    text        NOT NULL,
    action_name text,
    task_id     bigint,
    attempt_id  bigint,
    type        text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE run_events_id_seq OWNED BY run_events.id;
CREATE INDEX run_events_run ON run_events (project, domain, run_name, id);
CREATE INDEX run_events_scope ON run_events (project, domain, id) WHERE id > 0;

ALTER TABLE attempt_logs RENAME TO attempt_logs_unpartitioned;
ALTER TABLE attempt_logs_unpartitioned RENAME CONSTRAINT attempt_logs_pkey TO attempt_logs_unpartitioned_pkey;
CREATE TABLE attempt_logs (
    attempt_id bigint      NOT NULL,
    stdout     text        NOT NULL DEFAULT '',
    stderr     text        NOT NULL DEFAULT '',
    truncated  boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, created_at)
) PARTITION BY RANGE (created_at);

ALTER TABLE attempt_log_chunks RENAME TO attempt_log_chunks_unpartitioned;
ALTER TABLE attempt_log_chunks_unpartitioned RENAME CONSTRAINT attempt_log_chunks_pkey TO attempt_log_chunks_unpartitioned_pkey;
ALTER INDEX attempt_log_chunks_offset RENAME TO attempt_log_chunks_unpartitioned_offset;
CREATE TABLE attempt_log_chunks (
    attempt_id  bigint      NOT NULL,
    seq         bigint      NOT NULL DEFAULT nextval('attempt_log_chunks_seq_seq'),
    stream      text        NOT NULL CONSTRAINT attempt_log_chunks_stream_check CHECK (stream IN ('stdout', 'stderr')),
    data        text        NOT NULL,
    byte_offset bigint      NOT NULL,
    dropped     bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, seq, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE attempt_log_chunks_seq_seq OWNED BY attempt_log_chunks.seq;
CREATE INDEX attempt_log_chunks_offset ON attempt_log_chunks (attempt_id, byte_offset) WHERE dropped = 0;

-- The default partitions, each with an index of created_at of its own (no
-- other partition has one), by which the store finds and moves their rows
-- into the partitions it makes (EnsurePartitions).
CREATE TABLE run_events_default PARTITION OF run_events DEFAULT;
CREATE INDEX run_events_default_created ON run_events_default (created_at);
CREATE TABLE attempt_logs_default PARTITION OF attempt_logs DEFAULT;
CREATE INDEX attempt_logs_default_created ON attempt_logs_default (created_at);
CREATE TABLE attempt_log_chunks_default PARTITION OF attempt_log_chunks DEFAULT;
CREATE INDEX attempt_log_chunks_default_created ON attempt_log_chunks_default (created_at);

-- +goose StatementBegin
DO $$
DECLARE
    t text;
    day timestamptz;
BEGIN
    FOREACH t IN ARRAY ARRAY['run_events', 'attempt_logs', 'attempt_log_chunks'] LOOP
        FOR day IN EXECUTE format($q$
            SELECT date_trunc('day', created_at, 'UTC') FROM %I
            UNION SELECT date_trunc('day', now(), 'UTC') + n * interval '24 hours' FROM generate_series(0, 3) n$q$,
            t || '_unpartitioned')
        LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                t || '_p' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD'), t, day, day + interval '24 hours');
        END LOOP;
    END LOOP;
END
$$;
-- +goose StatementEnd

INSERT INTO run_events (id, project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
SELECT id, project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at
  FROM run_events_unpartitioned;
INSERT INTO attempt_logs (attempt_id, stdout, stderr, truncated, created_at)
SELECT attempt_id, stdout, stderr, truncated, created_at FROM attempt_logs_unpartitioned;
INSERT INTO attempt_log_chunks (attempt_id, seq, stream, data, byte_offset, dropped, created_at)
SELECT attempt_id, seq, stream, data, byte_offset, dropped, created_at FROM attempt_log_chunks_unpartitioned;
DROP TABLE run_events_unpartitioned;
DROP TABLE attempt_logs_unpartitioned;
DROP TABLE attempt_log_chunks_unpartitioned;

-- +goose Down
-- The tables as migrations 00001, 00007, 00008 and 00011 left them, with
-- every row; a log row whose attempt is gone cannot be kept under the
-- foreign key and is left out.
ALTER TABLE run_events RENAME TO run_events_partitioned;
ALTER TABLE run_events_partitioned RENAME CONSTRAINT run_events_pkey TO run_events_partitioned_pkey;
ALTER INDEX run_events_run RENAME TO run_events_partitioned_run;
ALTER INDEX run_events_scope RENAME TO run_events_partitioned_scope;
CREATE TABLE run_events (
    id          bigint      PRIMARY KEY DEFAULT nextval('run_events_id_seq'),
    project     text        NOT NULL,
    domain      text        NOT NULL,
    run_name    text        NOT NULL,
    action_name text,
    task_id     bigint,
    attempt_id  bigint,
    type        text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER SEQUENCE run_events_id_seq OWNED BY run_events.id;
INSERT INTO run_events SELECT id, project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at
  FROM run_events_partitioned;
CREATE INDEX run_events_run ON run_events (project, domain, run_name, id);
CREATE INDEX run_events_scope ON run_events (project, domain, id) WHERE id > 0;
DROP TABLE run_events_partitioned;

ALTER TABLE attempt_logs RENAME TO attempt_logs_partitioned;
ALTER TABLE attempt_logs_partitioned RENAME CONSTRAINT attempt_logs_pkey TO attempt_logs_partitioned_pkey;
CREATE TABLE attempt_logs (
    attempt_id bigint      PRIMARY KEY REFERENCES attempts ON DELETE CASCADE,
    stdout     text        NOT NULL DEFAULT '',
    stderr     text        NOT NULL DEFAULT '',
    truncated  boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO attempt_logs SELECT DISTINCT ON (l.attempt_id) l.attempt_id, l.stdout, l.stderr, l.truncated, l.created_at
  FROM attempt_logs_partitioned l JOIN attempts a ON a.id = l.attempt_id ORDER BY l.attempt_id, l.created_at;
DROP TABLE attempt_logs_partitioned;

ALTER TABLE attempt_log_chunks RENAME TO attempt_log_chunks_partitioned;
ALTER TABLE attempt_log_chunks_partitioned RENAME CONSTRAINT attempt_log_chunks_pkey TO attempt_log_chunks_partitioned_pkey;
ALTER INDEX attempt_log_chunks_offset RENAME TO attempt_log_chunks_partitioned_offset;
CREATE TABLE attempt_log_chunks (
    attempt_id  bigint      NOT NULL REFERENCES attempts ON DELETE CASCADE,
    seq         bigint      NOT NULL DEFAULT nextval('attempt_log_chunks_seq_seq'),
    stream      text        NOT NULL CONSTRAINT attempt_log_chunks_stream_check CHECK (stream IN ('stdout', 'stderr')),
    data        text        NOT NULL,
    byte_offset bigint      NOT NULL,
    dropped     bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, seq)
);
ALTER SEQUENCE attempt_log_chunks_seq_seq OWNED BY attempt_log_chunks.seq;
INSERT INTO attempt_log_chunks SELECT c.attempt_id, c.seq, c.stream, c.data, c.byte_offset, c.dropped, c.created_at
  FROM attempt_log_chunks_partitioned c JOIN attempts a ON a.id = c.attempt_id;
CREATE INDEX attempt_log_chunks_offset ON attempt_log_chunks (attempt_id, byte_offset) WHERE dropped = 0;
DROP TABLE attempt_log_chunks_partitioned;
