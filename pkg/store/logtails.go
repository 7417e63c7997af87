package store

import (
	"context"
	"unicode/utf8"
)

// LogTail is the end of one attempt's output, per stream, as GET logs
// shows it (the chunks shipped while it ran when there are any, else its
// final report's), each stream cut to a bound.
type LogTail struct {
	Stdout, Stderr StreamTail
}

// StreamTail is the end of one stream of an attempt's output.
type StreamTail struct {
	// Text is the stream's last bytes, at most the bound asked for, cut at
	// a character boundary (a marker of dropped output is not text).
	Text string
	// Bytes is how many bytes of the stream Capstan held: the chunks kept
	// and those dropped past Config.LogMaxBytes, or the final report's.
	Bytes int64
	// Cut is true when Text is not the whole of what the attempt wrote on
	// the stream: Bytes is more than Text, or the executor truncated its
	// final report.
	Cut bool
}

// logTailsSQL reads, for each attempt of @ids, each stream's last @max
// characters (at least its last @max bytes) and how many bytes the stream
// held: from its chunks when the attempt has any (each chunk's distance
// from the stream's end summed newest first, so only the chunks that end
// within @max of it are read and joined; a marker's dropped bytes count),
// else from its attempt_logs row with that row's truncated flag.
const logTailsSQL = `WITH c AS (
	SELECT attempt_id, stream, seq, data, dropped,
	       sum(octet_length(data)) OVER (PARTITION BY attempt_id, stream ORDER BY seq DESC) - octet_length(data) AS after
	  FROM attempt_log_chunks WHERE attempt_id = ANY(CAST(@ids AS bigint[])))
SELECT attempt_id, stream,
       coalesce(right(string_agg(data, '' ORDER BY seq) FILTER (WHERE dropped = 0 AND after < @max), @max), '') AS text,
       sum(octet_length(data)) + sum(dropped) AS bytes, false AS truncated
  FROM c GROUP BY attempt_id, stream
UNION ALL
SELECT l.attempt_id, s.stream, right(s.text, @max), octet_length(s.text), l.truncated
  FROM attempt_logs l CROSS JOIN LATERAL (VALUES ('stdout', l.stdout), ('stderr', l.stderr)) AS s(stream, text)
 WHERE l.attempt_id = ANY(CAST(@ids AS bigint[]))
   AND NOT EXISTS (SELECT 1 FROM attempt_log_chunks x WHERE x.attempt_id = l.attempt_id)`

// LogTails returns the end of each of the attempts' output, each stream
// its last maxBytes bytes (at least 4), by attempt id; an attempt with no
// output has no entry. One statement, which reads and sends at most about
// 4×maxBytes of text per stream: call it on a bounded number of attempts.
func (s Logs) LogTails(ctx context.Context, ids []int64, maxBytes int) (map[int64]LogTail, error) {
	maxBytes = max(maxBytes, utf8.UTFMax)
	var rows []struct {
		AttemptID int64
		Stream    string
		Text      string
		Bytes     int64
		Truncated bool
	}
	if err := s.raw(ctx, logTailsSQL, map[string]any{"ids": array(ids), "max": maxBytes}).
		Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[int64]LogTail, len(ids))
	for _, r := range rows {
		text := lastBytes(r.Text, maxBytes)
		st := StreamTail{Text: text, Bytes: r.Bytes, Cut: r.Truncated || r.Bytes > int64(len(text))}
		t := out[r.AttemptID]
		if r.Stream == "stderr" {
			t.Stderr = st
		} else {
			t.Stdout = st
		}
		out[r.AttemptID] = t
	}
	return out, nil
}

// lastBytes returns the longest end of s of at most n bytes that starts
// at a character boundary.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
