package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const workflowsPath = "/v1/projects/demo/domains/dev/workflows"

// etlTemplate is a template body named etl whose one step reads its
// params; description tells versions apart.
func etlTemplate(description string) string {
	return `{"name":"etl","description":"` + description + `",
		"params":[{"name":"TARGET","required":true},{"name":"COUNT","type":"number","default":3},
		          {"name":"DRY","type":"boolean","default":false},{"name":"CFG","type":"json"}],
		"spec":{"steps":[{"name":"load","command":"echo $TARGET $COUNT"},
		                 {"name":"report","command":"true","if":"params.COUNT > 2 && !params.DRY"}]}}`
}

// A push registers version 1; the same body again is version 1 (200); a
// changed body is version 2; reads of the latest, of a version and of the
// versions agree; a delete stops reads and new runs.
func TestPushWorkflowVersions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, v1 := f.do(t, http.MethodPost, workflowsPath, etlTemplate("one"))
	require.Equal(t, http.StatusCreated, status, v1)
	require.Equal(t, float64(1), v1["version"])
	require.Len(t, v1["params"], 4)
	require.NotContains(t, v1["spec"], "params", "params show beside the spec, once")
	status, _, same := f.do(t, http.MethodPost, workflowsPath, etlTemplate("one"))
	require.Equal(t, http.StatusOK, status, same)
	require.Equal(t, float64(1), same["version"])
	status, _, v2 := f.do(t, http.MethodPost, workflowsPath, etlTemplate("two"))
	require.Equal(t, http.StatusCreated, status, v2)
	require.Equal(t, float64(2), v2["version"])

	status, _, latest := f.do(t, http.MethodGet, workflowsPath+"/etl", "")
	require.Equal(t, http.StatusOK, status, latest)
	require.Equal(t, "two", latest["description"])
	status, _, old := f.do(t, http.MethodGet, workflowsPath+"/etl/versions/1", "")
	require.Equal(t, http.StatusOK, status, old)
	require.Equal(t, "one", old["description"])
	status, _, versions := f.do(t, http.MethodGet, workflowsPath+"/etl/versions", "")
	require.Equal(t, http.StatusOK, status, versions)
	require.Len(t, versions["workflows"], 2)
	status, _, list := f.do(t, http.MethodGet, workflowsPath, "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["workflows"], 1)

	status, _, _ = f.do(t, http.MethodDelete, workflowsPath+"/etl", "")
	require.Equal(t, http.StatusNoContent, status)
	status, _, p := f.do(t, http.MethodGet, workflowsPath+"/etl", "")
	require.Equal(t, http.StatusNotFound, status, p)
	status, _, p = f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":"x"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Equal(t, "workflow", fields(p)[0])
}

// A run of a template records the version it ran and its resolved params
// (defaults filled); a later version leaves it as it was.
func TestRunOfWorkflowRecordsItsVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, workflowsPath, etlTemplate("one"))
	require.Equal(t, http.StatusCreated, status, p)
	status, _, run := f.do(t, http.MethodPost, runsPath,
		`{"name":"r1","workflow":{"name":"etl"},"params":{"TARGET":"db","CFG":{"a":[1,2]}}}`)
	require.Equal(t, http.StatusCreated, status, run)
	require.Equal(t, map[string]any{"name": "etl", "version": float64(1)}, run["workflow"])
	require.Equal(t, map[string]any{"TARGET": "db", "COUNT": float64(3), "DRY": false, "CFG": map[string]any{"a": []any{float64(1), float64(2)}}},
		run["params"])
	spec := run["spec"].(map[string]any)

	status, _, p = f.do(t, http.MethodPost, workflowsPath, `{"name":"etl","spec":{"steps":[{"name":"other","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	status, _, now := f.do(t, http.MethodGet, runsPath+"/r1", "")
	require.Equal(t, http.StatusOK, status, now)
	require.Equal(t, spec, now["spec"], "a new version leaves the run's spec as it was")
	require.Equal(t, map[string]any{"name": "etl", "version": float64(1)}, now["workflow"])

	status, _, pinned := f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"etl","version":1},"params":{"TARGET":"x"}}`)
	require.Equal(t, http.StatusCreated, status, pinned)
	require.Equal(t, float64(1), pinned["workflow"].(map[string]any)["version"])
	status, _, latest := f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"etl"}}`)
	require.Equal(t, http.StatusCreated, status, latest)
	require.Equal(t, float64(2), latest["workflow"].(map[string]any)["version"])
}

// Params that do not fit the declarations, and templates that cannot be,
// are 422s naming the field; nothing is written.
func TestWorkflowAndParamProblems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, workflowsPath, etlTemplate("one"))
	require.Equal(t, http.StatusCreated, status, p)
	for _, c := range []struct{ path, body, field string }{
		{runsPath, `{"workflow":{"name":"etl"}}`, "params.TARGET"},
		{runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":"x","NOPE":1}}`, "params.NOPE"},
		{runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":"x","COUNT":"three"}}`, "params.COUNT"},
		{runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":7}}`, "params.TARGET"},
		{runsPath, `{"workflow":{"name":"etl","version":9},"params":{"TARGET":"x"}}`, "workflow"},
		{runsPath, `{"spec":{"params":[{"name":"N","type":"number"}],"steps":[{"name":"a","command":"true"}]},"params":{"N":true}}`, "params.N"},
		{runsPath, `{"spec":` + okSpec + `,"workflow":{"name":"etl"}}`, "spec"},
		{workflowsPath, `{"name":"bad","spec":{"steps":[{"name":"a","plugin":"docker"}]}}`, "spec.steps[0].plugin"},
		{workflowsPath, `{"name":"bad","params":[{"name":"N","type":"number","default":"x"}],"spec":` + okSpec + `}`, "params[0].default"},
		{workflowsPath, `{"name":"bad","params":[{"name":"N","type":"color"}],"spec":` + okSpec + `}`, "params[0].type"},
		{workflowsPath, `{"name":"bad","params":[{"name":"N"}],"spec":{"params":[{"name":"M"}],"steps":[{"name":"a","command":"true"}]}}`, "spec.params"},
	} {
		status, _, p := f.do(t, http.MethodPost, c.path, c.body)
		require.Contains(t, []int{http.StatusUnprocessableEntity, http.StatusBadRequest}, status, "%s: %v", c.body, p)
		require.Contains(t, fields(p), c.field, "%s: %v", c.body, p)
	}
	require.Equal(t, 0, runCount(t, f.store))
	status, _, p = f.do(t, http.MethodGet, workflowsPath+"/bad", "")
	require.Equal(t, http.StatusNotFound, status, p)
}

// A create from the api's cache of templates never runs a version that
// another replica superseded or deleted since: the guarded insert refuses
// it and the create reads the template again.
func TestRunOfWorkflowSeesOtherReplicasPushes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := newFixtureOn(t, f.store, Config{}, nil) // a second api on the same database
	status, _, p := f.do(t, http.MethodPost, workflowsPath, etlTemplate("one"))
	require.Equal(t, http.StatusCreated, status, p)
	status, _, run := f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":"x"}}`)
	require.Equal(t, http.StatusCreated, status, run)
	require.Equal(t, float64(1), run["workflow"].(map[string]any)["version"])

	status, _, p = other.do(t, http.MethodPost, workflowsPath, etlTemplate("two"))
	require.Equal(t, http.StatusCreated, status, p)
	status, _, run = f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"etl"},"params":{"TARGET":"x"}}`)
	require.Equal(t, http.StatusCreated, status, run)
	require.Equal(t, float64(2), run["workflow"].(map[string]any)["version"], "the latest, though this api had read version 1")

	status, _, _ = other.do(t, http.MethodDelete, workflowsPath+"/etl", "")
	require.Equal(t, http.StatusNoContent, status)
	for _, body := range []string{`{"workflow":{"name":"etl"},"params":{"TARGET":"x"}}`,
		`{"workflow":{"name":"etl","version":2},"params":{"TARGET":"x"}}`} {
		status, _, p = f.do(t, http.MethodPost, runsPath, body)
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %v", body, p)
		require.Equal(t, "workflow", fields(p)[0])
	}
	require.Equal(t, 2, runCount(t, f.store))
}

// A list's cursor that no page gave is a 400 naming it.
func TestListBadCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, path := range []string{workflowsPath, "/v1/projects/demo/domains/dev/schedules", triggersPath} {
		for _, c := range []string{"%00", "Not%20A%20Name"} {
			status, _, p := f.do(t, http.MethodGet, path+"?cursor="+c, "")
			require.Equal(t, http.StatusBadRequest, status, "%s: %v", path, p)
			require.Equal(t, "cursor", fields(p)[0], path)
		}
	}
}
