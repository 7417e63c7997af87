// Package ui serves Capstan's dashboard under /ui/: plain ES modules and CSS
// embedded in the api binary and served as they are (no front-end build
// step), plus dagre (MIT, vendored under static/vendor) for the workflow
// graph. The pages read the public API — runs and where each comes from
// (template and version, schedule and scheduled time, or trigger and
// event), the workflow graph and timeline, actions with tasks and attempt
// history in Iris's state colours, live logs, workflow templates with
// their versions and params, schedules with their next times and recent
// runs, workers, aborts needing intervention — and stay current from the
// runs' event streams; controls (abort, suspend, resume, restart, approve,
// reject, pause, unpause and trigger a schedule) sit behind a
// confirmation.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err)
	}
	return http.FileServer(http.FS(sub))
}
