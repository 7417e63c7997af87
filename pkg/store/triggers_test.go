package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// trigger is a store.Trigger named name in p/d, of event key, running the
// latest version of workflow (or version, when not 0).
func trigger(name, key, workflow string, version int) store.Trigger {
	t := store.Trigger{Project: "p", Domain: "d", Name: name, EventKey: key, WorkflowName: workflow,
		Filter: "event.payload.n > 1", Params: map[string]string{"n": "event.payload.n"}}
	if version > 0 {
		t.WorkflowVersion = &version
	}
	return t
}

// A trigger is created once per name, read, listed by name in pages, and
// deleted once.
func TestTriggersCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	tr := st.Triggers()
	for _, name := range []string{"c", "a", "b"} {
		_, err := tr.CreateTrigger(ctx, trigger(name, "k", "etl", 0))
		require.NoError(t, err)
	}
	_, err := tr.CreateTrigger(ctx, trigger("a", "other", "etl", 0))
	require.ErrorIs(t, err, store.ErrConflict)

	got, err := tr.GetTrigger(ctx, store.TriggerKey{Project: "p", Domain: "d", Name: "a"})
	require.NoError(t, err)
	require.Equal(t, "k", got.EventKey)
	require.Equal(t, "event.payload.n > 1", got.Filter)
	require.Equal(t, map[string]string{"n": "event.payload.n"}, got.Params)
	require.Nil(t, got.WorkflowVersion)
	require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)

	page, next, err := tr.ListTriggers(ctx, "p", "d", "", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, triggerNames(page))
	require.Equal(t, "b", next)
	page, next, err = tr.ListTriggers(ctx, "p", "d", next, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, triggerNames(page))
	require.Empty(t, next)
	_, _, err = tr.ListTriggers(ctx, "p", "d", "\x00", 2)
	require.ErrorIs(t, err, store.ErrBadCursor)

	key := store.TriggerKey{Project: "p", Domain: "d", Name: "b"}
	require.NoError(t, tr.DeleteTrigger(ctx, key))
	require.ErrorIs(t, tr.DeleteTrigger(ctx, key), store.ErrNotFound)
	_, err = tr.GetTrigger(ctx, key)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func triggerNames(ts []store.Trigger) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// KeyTriggers reads the triggers of one key, by name, each with the
// template version it runs: the pinned one, or the latest; none for a
// missing version, a missing template or a deleted one.
func TestKeyTriggers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	for _, d := range []string{"one", "two"} {
		_, _, err := st.Templates().PushTemplate(ctx, template("etl", d))
		require.NoError(t, err)
	}
	_, _, err := st.Templates().PushTemplate(ctx, template("old", "x"))
	require.NoError(t, err)
	require.NoError(t, st.Templates().DeleteTemplate(ctx, store.TemplateKey{Project: "p", Domain: "d", Name: "old"}))

	none, err := st.Triggers().KeyTriggers(ctx, "p", "d", "k")
	require.NoError(t, err)
	require.Empty(t, none)

	for _, tr := range []store.Trigger{trigger("latest", "k", "etl", 0), trigger("pinned", "k", "etl", 1),
		trigger("no-version", "k", "etl", 9), trigger("no-template", "k", "ghost", 0),
		trigger("deleted", "k", "old", 0), trigger("elsewhere", "other", "etl", 0)} {
		_, err := st.Triggers().CreateTrigger(ctx, tr)
		require.NoError(t, err)
	}
	got, err := st.Triggers().KeyTriggers(ctx, "p", "d", "k")
	require.NoError(t, err)
	var names []string
	versions := map[string]int{}
	for _, kt := range got {
		names = append(names, kt.Trigger.Name)
		if kt.Template != nil {
			versions[kt.Trigger.Name] = kt.Template.Version
			require.Len(t, kt.Template.Spec.Steps, 2, "the version's spec is decoded")
		}
	}
	require.Equal(t, []string{"deleted", "latest", "no-template", "no-version", "pinned"}, names)
	require.Equal(t, map[string]int{"latest": 2, "pinned": 1}, versions)
	require.Equal(t, map[string]string{"n": "event.payload.n"}, got[1].Trigger.Params)
}

// triggeredRun is a store.NewRun of twoSteps named name in p/d, of trigger
// "t" and event id.
func triggeredRun(name, id string) store.NewRun {
	spec := twoSteps()
	spec.Normalize()
	return store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: name}, Spec: spec,
		Params: map[string]any{"n": float64(2)},
		Origin: store.RunOrigin{WorkflowName: "etl", WorkflowVersion: 1, TriggerName: "t", EventID: id}}
}

// A published event is stored with its runs once per id: the runs are
// created as CreateRuns creates them; a second publication of the id
// writes nothing; the payload reads back with numbers as float64.
func TestPublishEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	tr := st.Triggers()
	key := store.PublishedEventKey{Project: "p", Domain: "d", ID: "ev-1"}
	e := store.PublishedEvent{Project: "p", Domain: "d", ID: "ev-1", Key: "order.created",
		Payload:    map[string]any{"amount": 150, "items": []any{"a"}},
		Deliveries: []store.EventDelivery{{Trigger: "a", Run: "a-1"}, {Trigger: "b", Run: "b-1"}, {Trigger: "c", Error: "filter: x"}}}
	_, created, err := tr.PublishEvent(ctx, e, []store.NewRun{triggeredRun("b-1", "ev-1"), triggeredRun("a-1", "ev-1")})
	require.NoError(t, err)
	require.True(t, created)
	for _, name := range []string{"a-1", "b-1"} {
		k := domain.RunKey{Project: "p", Domain: "d", Run: name}
		d, err := st.Runs().GetRun(ctx, k)
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseQueued), d.Run.Phase)
		require.Equal(t, "t", *d.Run.TriggerName)
		require.Equal(t, "ev-1", *d.Run.EventID)
		require.Equal(t, "etl", *d.Run.WorkflowName)
		require.Equal(t, map[string]any{"n": float64(2)}, d.Run.Params)
		require.Len(t, d.Actions, 1)
		require.Equal(t, domain.RootActionName, d.Actions[0].Action.Name)
		require.Equal(t, []string{"run.created"}, events(t, db, k))
	}

	again := e
	again.Key, again.Deliveries = "other", nil
	_, created, err = tr.PublishEvent(ctx, again, []store.NewRun{triggeredRun("a-2", "ev-1")})
	require.NoError(t, err)
	require.False(t, created)
	_, err = st.Runs().GetRun(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "a-2"})
	require.ErrorIs(t, err, store.ErrNotFound, "a publication of an id again creates nothing")

	got, err := tr.GetPublishedEvent(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "order.created", got.Key, "the first publication's record")
	require.Equal(t, map[string]any{"amount": float64(150), "items": []any{"a"}}, got.Payload)
	require.Equal(t, e.Deliveries, got.Deliveries)

	bare := store.PublishedEvent{Project: "p", Domain: "d", ID: "ev-2", Key: "k"}
	_, created, err = tr.PublishEvent(ctx, bare, nil)
	require.NoError(t, err)
	require.True(t, created)
	got, err = tr.GetPublishedEvent(ctx, store.PublishedEventKey{Project: "p", Domain: "d", ID: "ev-2"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{}, got.Payload)
	require.Empty(t, got.Deliveries)
	_, err = tr.GetPublishedEvent(ctx, store.PublishedEventKey{Project: "p", Domain: "d", ID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A run name taken fails the whole publication, which writes nothing;
// TakenRunNames says which names are taken.
func TestPublishEventRunNameTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	_, _, err := st.Runs().CreateRun(ctx, triggeredRun("b-1", "other"))
	require.NoError(t, err)
	e := store.PublishedEvent{Project: "p", Domain: "d", ID: "ev", Key: "k"}
	_, _, err = st.Triggers().PublishEvent(ctx, e, []store.NewRun{triggeredRun("a-1", "ev"), triggeredRun("b-1", "ev")})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = st.Triggers().GetPublishedEvent(ctx, store.PublishedEventKey{Project: "p", Domain: "d", ID: "ev"})
	require.ErrorIs(t, err, store.ErrNotFound, "nothing is written")
	_, err = st.Runs().GetRun(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "a-1"})
	require.ErrorIs(t, err, store.ErrNotFound, "nothing is written")
	taken, err := st.Triggers().TakenRunNames(ctx, "p", "d", []string{"a-1", "b-1"})
	require.NoError(t, err)
	require.Equal(t, []string{"b-1"}, taken)
}

// A publication of an id another one published and has not committed
// waits for it, then writes nothing: one publication of an id wins.
func TestPublishEventWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	e := store.PublishedEvent{Project: "p", Domain: "d", ID: "ev", Key: "k"}
	inserted, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.InTx(ctx, func(tx *store.Store) error {
			_, created, err := tx.Triggers().PublishEvent(ctx, e, []store.NewRun{triggeredRun("a-1", "ev")})
			if err == nil && !created {
				t.Error("the first publication created nothing")
			}
			close(inserted)
			<-release
			return err
		})
	}()
	<-inserted
	type outcome struct {
		created bool
		err     error
	}
	second := make(chan outcome, 1)
	go func() {
		_, created, err := st.Triggers().PublishEvent(ctx, e, []store.NewRun{triggeredRun("a-1", "ev")})
		second <- outcome{created, err}
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n == 1
	}, 10*time.Second, 5*time.Millisecond, "the second publication waits for the first")
	close(release)
	require.NoError(t, <-first)
	o := <-second
	require.NoError(t, o.err, "it conflicts on the event, not on the run")
	require.False(t, o.created)
}
