package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// LogChunk is a row of attempt_log_chunks: output of one stream of an
// attempt, shipped while it ran, or a marker that older output was dropped.
type LogChunk struct {
	AttemptID int64 `gorm:"primaryKey"`
	// Seq orders an attempt's chunks (a database sequence: increasing, with
	// gaps). A marker keeps the seq of the newest chunk it replaced.
	Seq int64 `gorm:"primaryKey;autoIncrement"`
	// Stream is "stdout" or "stderr".
	Stream string
	// Data is the text (valid UTF-8, no NUL); empty for a marker.
	Data string
	// ByteOffset is where the chunk starts in the attempt's output, both
	// streams in shipping order, in bytes; a marker's is where the output it
	// replaced ended.
	ByteOffset int64
	// Dropped is, for a marker, how many bytes of its stream's older output
	// were dropped; 0 for output.
	Dropped   int64 `gorm:"default:0"`
	CreatedAt time.Time
}

// TableName is attempt_log_chunks.
func (LogChunk) TableName() string { return "attempt_log_chunks" }

// IsMarker reports whether c stands for dropped output rather than holding it.
func (c LogChunk) IsMarker() bool { return c.Dropped > 0 }

// NewLogChunk is output to append: Stream "stdout" or "stderr" (the table
// refuses others), Data valid UTF-8 without NUL (Postgres refuses NUL).
type NewLogChunk struct {
	Stream string
	Data   string
}

// AppendLogChunks locks attempt id (no other row, FOR NO KEY UPDATE, so
// appends of one attempt are serialized and its seqs commit in order: a
// reader paging by seq misses none), appends chunks after its stored
// output in order and returns the bytes of output the attempt shipped in
// all, dropped ones included; the commit notifies AttemptLogsChannel of
// the attempt when it appended any. Run it in InTx with
// DropLogChunksBefore to bound what is kept. Errors: ErrNotFound (no such
// attempt).
func (s Logs) AppendLogChunks(ctx context.Context, id int64, chunks []NewLogChunk) (int64, error) {
	var locked []int64
	if err := s.raw(ctx, `SELECT id FROM attempts WHERE id = ? FOR NO KEY UPDATE`, id).
		Scan(&locked).Error; err != nil {
		return 0, mapErr(err)
	}
	if len(locked) == 0 {
		return 0, ErrNotFound
	}
	var ends []int64
	if err := s.raw(ctx, `SELECT byte_offset + octet_length(data) FROM attempt_log_chunks
		WHERE attempt_id = ? ORDER BY seq DESC LIMIT 1`, id).Scan(&ends).Error; err != nil {
		return 0, mapErr(err)
	}
	var total int64
	if len(ends) > 0 {
		total = ends[0]
	}
	rows := make([]LogChunk, 0, len(chunks))
	for _, c := range chunks {
		if c.Data == "" {
			continue
		}
		rows = append(rows, LogChunk{AttemptID: id, Stream: c.Stream, Data: c.Data, ByteOffset: total})
		total += int64(len(c.Data))
	}
	if len(rows) == 0 {
		return total, nil
	}
	if err := mapErr(s.q(ctx).Create(&rows).Error); err != nil {
		return 0, err
	}
	return total, s.outputGrew(ctx, id)
}

// LogEnds returns, by attempt id, the bytes of output each of ids shipped
// (the end of its last chunk, dropped ones included: where AppendLogChunks
// would append next); an attempt with no chunk has no entry. One
// statement: a probe of the newest chunk per id.
func (s Logs) LogEnds(ctx context.Context, ids []int64) (map[int64]int64, error) {
	var rows []struct {
		AttemptID int64
		End       int64
	}
	if err := s.raw(ctx, `SELECT i.id AS attempt_id, c.byte_offset + octet_length(c.data) AS "end"
		FROM unnest(CAST(? AS bigint[])) AS i(id)
		CROSS JOIN LATERAL (SELECT byte_offset, data FROM attempt_log_chunks
			WHERE attempt_id = i.id ORDER BY seq DESC LIMIT 1) AS c`, array(ids)).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[int64]int64, len(rows))
	for _, r := range rows {
		out[r.AttemptID] = r.End
	}
	return out, nil
}

// droppedRow is a deleted chunk as DropLogChunksBefore tallies it.
type droppedRow struct {
	Seq       int64
	Stream    string
	EndOffset int64
	N         int64
}

// AppendLogsBounded appends chunks to attempt id's output (AppendLogChunks)
// and drops the oldest past maxBytes kept (domain.LogCut,
// DropLogChunksBefore), in the caller's transaction. Errors: ErrNotFound
// (no such attempt).
func (s Logs) AppendLogsBounded(ctx context.Context, id int64, chunks []NewLogChunk, maxBytes int64) error {
	total, err := s.AppendLogChunks(ctx, id, chunks)
	if err != nil {
		return err
	}
	if cut := domain.LogCut(total, maxBytes); cut > 0 {
		_, err = s.DropLogChunksBefore(ctx, id, cut)
	}
	return err
}

// DropLogChunksBefore deletes attempt id's output chunks that start before
// offset (bytes, see LogChunk.ByteOffset) and keeps one marker per stream
// in front of the rest, counting every byte of the stream dropped so far.
// It returns the bytes dropped by this call. Call it in the transaction of
// AppendLogChunks, which holds the attempt's lock.
func (s Logs) DropLogChunksBefore(ctx context.Context, id, offset int64) (int64, error) {
	var gone []droppedRow
	if err := s.raw(ctx, `DELETE FROM attempt_log_chunks
		WHERE attempt_id = ? AND dropped = 0 AND byte_offset < ?
		RETURNING seq, stream, byte_offset + octet_length(data) AS end_offset, octet_length(data) AS n`,
		id, offset).Scan(&gone).Error; err != nil {
		return 0, mapErr(err)
	}
	markers := map[string]*LogChunk{}
	var dropped int64
	for _, g := range gone {
		m := markers[g.Stream]
		if m == nil {
			m = &LogChunk{AttemptID: id, Stream: g.Stream}
			markers[g.Stream] = m
		}
		m.Seq, m.ByteOffset = max(m.Seq, g.Seq), max(m.ByteOffset, g.EndOffset)
		m.Dropped += g.N
		dropped += g.N
	}
	for stream, m := range markers {
		var before []int64
		if err := s.raw(ctx, `DELETE FROM attempt_log_chunks WHERE attempt_id = ? AND stream = ? AND dropped > 0
			RETURNING dropped`, id, stream).Scan(&before).Error; err != nil {
			return 0, mapErr(err)
		}
		for _, b := range before {
			m.Dropped += b
		}
		if err := s.exec(ctx, `INSERT INTO attempt_log_chunks (attempt_id, seq, stream, data, byte_offset, dropped)
			VALUES (?, ?, ?, '', ?, ?)`, id, m.Seq, m.Stream, m.ByteOffset, m.Dropped).Error; err != nil {
			return 0, mapErr(err)
		}
	}
	return dropped, nil
}

// LogChunksAfter returns up to limit (0: all) of attempt id's chunks whose
// seq is greater than after, in seq order; none for an unknown attempt.
func (s Logs) LogChunksAfter(ctx context.Context, id, after int64, limit int) ([]LogChunk, error) {
	q := s.q(ctx).Where("attempt_id = ? AND seq > ?", id, after).Order("seq")
	if limit > 0 {
		q = q.Limit(limit)
	}
	var out []LogChunk
	return out, mapErr(q.Find(&out).Error)
}

// FinalAttemptLog returns the bounded output attempt id's final report
// carried; an attempt without one (or with no output) has empty logs.
func (s Logs) FinalAttemptLog(ctx context.Context, id int64) (AttemptLog, error) {
	var l []AttemptLog
	if err := s.q(ctx).Where("attempt_id = ?", id).Limit(1).Find(&l).Error; err != nil {
		return AttemptLog{}, mapErr(err)
	}
	if len(l) == 0 {
		return AttemptLog{AttemptID: id}, nil
	}
	return l[0], nil
}

// FindAttempt returns attempt number n of task idx of an action's
// generation (nil: its current one). Errors: ErrNotFound.
func (s Attempts) FindAttempt(ctx context.Context, key domain.ActionKey, generation *int, idx, n int) (Attempt, error) {
	var a Attempt
	err := s.raw(ctx, `SELECT at.* FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions x ON (x.project, x.domain, x.run_name, x.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE t.project = ? AND t.domain = ? AND t.run_name = ? AND t.action_name = ? AND t.idx = ? AND at.number = ?
		AND t.generation = COALESCE(CAST(? AS integer), x.generation)`,
		key.Project, key.Domain, key.Run, key.Action, idx, n, generation).Scan(&a).Error
	if err != nil {
		return Attempt{}, mapErr(err)
	}
	if a.ID == 0 {
		return Attempt{}, ErrNotFound
	}
	return a, nil
}
