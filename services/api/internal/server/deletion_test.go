package server

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// newArchiveFixture is a fixture whose server archives to a file://
// bucket in a new directory, which it returns, with the database.
func newArchiveFixture(t *testing.T) (*fixture, *sql.DB, string) {
	t.Helper()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	dir := t.TempDir()
	a, err := archive.Open(context.Background(), "file://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return newFixtureOn(t, st, Config{}, nil, func(d *Deps) { d.Archive = a }), db, dir
}

// endedRun creates run name of a step "s" of two tasks that write output
// "n" (the first succeeds with output shipped as chunks, the second fails
// with exit 1) and a child run of the step, and ends both.
func endedRun(t *testing.T, f *fixture, db *sql.DB, name string) domain.RunKey {
	t.Helper()
	ctx := context.Background()
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"`+name+`","spec":{"steps":[
		{"name":"s","command":"x","replicas":2,"outputs":["n"],"max_task_failures":1,"secret_env":{"TOKEN":"hush"}}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: name}
	ids := startTasks(t, f, key, "s")
	f.report(t, ids["s"][0], `{"state":"RUNNING"}`)
	f.appendLogs(t, ids["s"][0], http.StatusNoContent, `{"stream":"stdout","data":"working\n"}`)
	f.report(t, ids["s"][0], `{"state":"SUCCEEDED","exit_code":0,"outputs":{"n":"1"}}`)
	f.report(t, ids["s"][1], `{"state":"FAILED","exit_code":1,"cause":"user","error":"exit status 1","stderr":"no\n"}`)
	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	leaf.Normalize()
	kid := domain.RunKey{Project: "demo", Domain: "dev", Run: name + "-s-0"}
	require.NoError(t, f.store.Runs().CreateChildRuns(ctx, []store.NewRun{{Key: kid, Spec: leaf,
		Child: &store.ChildOf{Parent: key.Action("s"), Depth: 1}}}))
	for _, q := range []string{
		`UPDATE tasks SET state = (SELECT a.state FROM attempts a WHERE a.task_id = tasks.id), ended_at = now()
		  WHERE run_name = $1`,
		`UPDATE actions SET phase = 'SUCCEEDED', ended_at = now() WHERE run_name IN ($1, $1 || '-s-0')`,
		`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE name IN ($1, $1 || '-s-0')`,
	} {
		_, err := db.Exec(q, name)
		require.NoError(t, err)
	}
	return key
}

// With the archive on, a delete writes the run and its child run to it
// first; GET archived-runs then answers each as GET run did before the
// delete. A run never archived is 404, and so is a live run's delete
// 409, writing nothing.
func TestDeleteRunArchivesFirst(t *testing.T) {
	t.Parallel()
	f, db, dir := newArchiveFixture(t)
	endedRun(t, f, db, "r1")
	before := map[string]string{"r1": f.raw(t, runsPath+"/r1"), "r1-s-0": f.raw(t, runsPath+"/r1-s-0")}
	require.Contains(t, before["r1"], `"outputs":{"n":`)
	require.Contains(t, before["r1"], `"children":[`)

	status, _, body := f.do(t, http.MethodDelete, runsPath+"/r1", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, []any{"r1", "r1-s-0"}, body["deleted"])
	status, _, _ = f.do(t, http.MethodGet, runsPath+"/r1", "")
	require.Equal(t, http.StatusNotFound, status, "deleted")
	for name, live := range before {
		require.JSONEq(t, live, f.raw(t, "/v1/projects/demo/domains/dev/archived-runs/"+name), name)
	}

	status, _, p := f.do(t, http.MethodGet, "/v1/projects/demo/domains/dev/archived-runs/nope", "")
	require.Equal(t, http.StatusNotFound, status, p)
	require.Equal(t, "not_found", p["code"])
	require.Equal(t, "run demo/dev/nope is not archived", p["detail"])

	status, _, body = f.do(t, http.MethodPost, runsPath, `{"name":"live","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	written := objects(t, dir)
	status, _, p = f.do(t, http.MethodDelete, runsPath+"/live", "")
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "not_terminal", p["code"])
	require.Equal(t, written, objects(t, dir), "a live run is not archived")
	status, _, p = f.do(t, http.MethodDelete, runsPath+"/nope", "")
	require.Equal(t, http.StatusNotFound, status, p)
}

// objects lists the documents under dir.
func objects(t *testing.T, dir string) []string {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(dir, "*", "*", "*", "*", "*", "*.json.gz"))
	require.NoError(t, err)
	return found
}

// A bucket that cannot be written (a regular file where the project's
// directory must be) makes a delete 503 archive_unavailable, and nothing
// is deleted.
func TestDeleteRunRefusedWhenTheArchiveFails(t *testing.T) {
	t.Parallel()
	f, db, dir := newArchiveFixture(t)
	endedRun(t, f, db, "r1")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "demo"), []byte("not a directory"), 0o644))

	status, hdr, p := f.do(t, http.MethodDelete, runsPath+"/r1", "")
	require.Equal(t, http.StatusServiceUnavailable, status, p)
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
	require.Equal(t, "archive_unavailable", p["code"])
	require.Contains(t, p["detail"], "run demo/dev/r1 was not deleted: it could not be archived first")
	for _, name := range []string{"r1", "r1-s-0"} {
		status, _, _ = f.do(t, http.MethodGet, runsPath+"/"+name, "")
		require.Equal(t, http.StatusOK, status, "%s is still there", name)
	}
}

// With the archive off a delete keeps nothing, and GET archived-runs is
// 404 saying the archive is off.
func TestArchivedRunWhenTheArchiveIsOff(t *testing.T) {
	t.Parallel()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	f := newFixtureOn(t, st, Config{}, nil)
	endedRun(t, f, db, "r1")
	status, _, body := f.do(t, http.MethodDelete, runsPath+"/r1", "")
	require.Equal(t, http.StatusOK, status, body)
	status, _, p := f.do(t, http.MethodGet, "/v1/projects/demo/domains/dev/archived-runs/r1", "")
	require.Equal(t, http.StatusNotFound, status, p)
	require.Equal(t, "run demo/dev/r1 is not archived: the archive is off (CAPSTAN_ARCHIVE_URL is not set)", p["detail"])
}

// An archived object that cannot be read (not gzip'd JSON) is 503
// archive_unavailable.
func TestArchivedRunUnreadable(t *testing.T) {
	t.Parallel()
	f, _, dir := newArchiveFixture(t)
	day := filepath.Join(dir, "demo", "dev", "2025", "01", "02")
	require.NoError(t, os.MkdirAll(day, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(day, "bad.json.gz"), []byte("not gzip"), 0o644))
	status, _, p := f.do(t, http.MethodGet, "/v1/projects/demo/domains/dev/archived-runs/bad", "")
	require.Equal(t, http.StatusServiceUnavailable, status, p)
	require.Equal(t, "archive_unavailable", p["code"])
	require.Equal(t, "run demo/dev/bad could not be read from the archive (CAPSTAN_ARCHIVE_URL; the api's log has the cause)",
		p["detail"])
}
