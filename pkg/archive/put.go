package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"gocloud.dev/blob"
)

// Reads of a run's rows while its document is written, each bounded.
const (
	// eventsPage is how many run_events rows one read returns.
	eventsPage = 1000
	// logsBatch is how many attempts' log tails one read returns: at most
	// about logsBatch × 2 streams × 4 × LogTailBytes of text.
	logsBatch = 32
)

// Put writes one document per run of keys, in order, each read from st
// and streamed to its object (Key, by the run's ended_at): a page of
// store.MaxTaskPageSize tasks, logsBatch attempts' logs and eventsPage
// events at a time, so a run of 10,000 tasks is archived in a few
// megabytes. An object already there for the run is replaced. A nil
// *Archive writes nothing. It stops at the first run it cannot archive;
// the documents written before stay. Errors: store.ErrNotFound (no such
// run), a *store.NotTerminalError (store.ErrNotTerminal) for a run that
// has not ended, else the store's or the bucket's.
//
// The rows of a run are read in several statements, not one snapshot: an
// ended run does not change, but one restarted meanwhile may be archived
// partly before the restart; the delete that follows then refuses it.
func (a *Archive) Put(ctx context.Context, st *store.Store, keys ...domain.RunKey) error {
	if a == nil {
		return nil
	}
	for _, key := range keys {
		if err := a.put(ctx, st, key); err != nil {
			return fmt.Errorf("archive run %s: %w", key, err)
		}
	}
	return nil
}

// put writes key's document.
func (a *Archive) put(ctx context.Context, st *store.Store, key domain.RunKey) error {
	d, err := st.Runs().GetRun(ctx, key)
	if err != nil {
		return err
	}
	if phase := domain.Phase(d.Run.Phase); !phase.IsTerminal() || d.Run.EndedAt == nil {
		return &store.NotTerminalError{Run: key.Run, Phase: phase}
	}
	outs, err := st.Actions().StepOutputs(ctx, key, nil)
	if err != nil {
		return err
	}
	// Cancelling the writer's context before Close aborts the write: no
	// partial object.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := a.bucket.NewWriter(wctx, Key(key, *d.Run.EndedAt), &blob.WriterOptions{ContentType: "application/gzip"})
	if err != nil {
		return fmt.Errorf("open object: %w", err)
	}
	gz := gzip.NewWriter(w)
	dw := &docWriter{st: st, key: key, logTail: a.logTail, buf: bufio.NewWriterSize(gz, 64<<10)}
	err = dw.document(ctx, d, outs)
	if err == nil {
		err = errors.Join(dw.buf.Flush(), gz.Close())
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write object: %w", err)
	}
	return nil
}

// docWriter writes one run's Document as JSON, its tasks and events as it
// reads them.
type docWriter struct {
	st      *store.Store
	key     domain.RunKey
	logTail int
	buf     *bufio.Writer
}

// raw writes s as it is.
func (w *docWriter) raw(s string) error {
	_, err := w.buf.WriteString(s)
	return err
}

// value writes v's JSON.
func (w *docWriter) value(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.buf.Write(raw)
	return err
}

// field writes `,"name":` and v's JSON.
func (w *docWriter) field(name string, v any) error {
	if err := w.raw(`,"` + name + `":`); err != nil {
		return err
	}
	return w.value(v)
}

// document writes the Document of d, the run as GetRun read it, with its
// steps' outputs.
func (w *docWriter) document(ctx context.Context, d store.RunDetail, outs map[string]map[string]string) error {
	run := d.Run
	run.Spec = run.Spec.Masked()
	if err := w.raw(`{"version":` + strconv.Itoa(Version)); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"archived_at", time.Now().UTC()}, {"log_tail_bytes", w.logTail}, {"run", run},
		{"children", d.Children}, {"outputs", outs}} {
		if err := w.field(f.name, f.v); err != nil {
			return err
		}
	}
	if err := w.raw(`,"actions":[`); err != nil {
		return err
	}
	for i, a := range d.Actions {
		if err := w.action(ctx, i, a); err != nil {
			return err
		}
	}
	if err := w.raw(`],"events":[`); err != nil {
		return err
	}
	if err := w.events(ctx); err != nil {
		return err
	}
	return w.raw(`]}`)
}

// action writes the i-th action of the document, a, with every one of its
// tasks, read page after page.
func (w *docWriter) action(ctx context.Context, i int, a store.ActionDetail) error {
	act := a.Action
	act.Spec = act.Spec.Masked()
	counts := make(map[string]int, len(a.TaskCounts))
	for st, n := range a.TaskCounts {
		counts[st.String()] = n
	}
	sep := ""
	if i > 0 {
		sep = ","
	}
	if err := w.raw(sep + `{"action":`); err != nil {
		return err
	}
	if err := w.value(act); err != nil {
		return err
	}
	if err := w.field("task_counts", counts); err != nil {
		return err
	}
	if err := w.field("task_count", a.TaskCount); err != nil {
		return err
	}
	if err := w.raw(`,"tasks":[`); err != nil {
		return err
	}
	page, first := store.TaskPage{Limit: store.MaxTaskPageSize}, true
	for {
		p, err := w.st.Actions().GetActionPage(ctx, w.key.Action(act.Name), page)
		if err != nil {
			return fmt.Errorf("read tasks of action %s: %w", act.Name, err)
		}
		for len(p.Tasks) > 0 {
			n := batchOf(p.Tasks)
			if err := w.tasks(ctx, p.Tasks[:n], first); err != nil {
				return err
			}
			p.Tasks, first = p.Tasks[n:], false
		}
		if p.NextCursor == "" {
			return w.raw(`]}`)
		}
		page.Cursor = p.NextCursor
	}
}

// batchOf is how many of tasks, at least one, hold at most logsBatch
// attempts together.
func batchOf(tasks []store.TaskDetail) int {
	n, attempts := 0, 0
	for n < len(tasks) && (n == 0 || attempts+len(tasks[n].Attempts) <= logsBatch) {
		attempts += len(tasks[n].Attempts)
		n++
	}
	return n
}

// tasks writes tasks, each with its attempts and their logs (read in one
// statement); first is true when they open the action's list.
func (w *docWriter) tasks(ctx context.Context, tasks []store.TaskDetail, first bool) error {
	var ids []int64
	for _, t := range tasks {
		for _, at := range t.Attempts {
			ids = append(ids, at.ID)
		}
	}
	var tails map[int64]store.LogTail
	if len(ids) > 0 {
		var err error
		if tails, err = w.st.Logs().LogTails(ctx, ids, w.logTail); err != nil {
			return fmt.Errorf("read logs: %w", err)
		}
	}
	for i, t := range tasks {
		doc := Task{Task: t.Task, Attempts: make([]Attempt, len(t.Attempts))}
		for j, at := range t.Attempts {
			tail := tails[at.ID]
			doc.Attempts[j] = Attempt{Attempt: at, Logs: Logs{Stdout: Stream(tail.Stdout), Stderr: Stream(tail.Stderr)}}
		}
		if !first || i > 0 {
			if err := w.raw(","); err != nil {
				return err
			}
		}
		if err := w.value(doc); err != nil {
			return err
		}
	}
	return nil
}

// events writes the run's events, read eventsPage at a time.
func (w *docWriter) events(ctx context.Context) error {
	f := store.EventFilter{Project: w.key.Project, Domain: w.key.Domain, Run: w.key.Run}
	var after int64
	for {
		evs, err := w.st.Events().EventsAfter(ctx, f, after, eventsPage)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		for _, e := range evs {
			if after > 0 {
				if err := w.raw(","); err != nil {
					return err
				}
			}
			if err := w.value(e); err != nil {
				return err
			}
			after = e.ID
		}
		if len(evs) < eventsPage {
			return nil
		}
	}
}
