// Package ui serves Capstan's dashboard under /ui/: plain ES modules and CSS
// embedded in the api binary and served as they are (no front-end build
// step), plus vendored modules under static/vendor, each with its licence:
// lit-html (the pages' rendering, which updates in place so a live page
// never replaces a focused element), dagre (the workflow graph's layout),
// js-yaml (specs as YAML) and @cfworker/json-schema (a spec checked against
// static/schema/workflow.json, the copy of schema/workflow.json that make
// generate writes, before a run of it is sent). The pages read the public
// API — runs and where each comes from (template and version, schedule and
// scheduled time, or trigger and event), the workflow graph (each node a
// link a keyboard reaches and opens), the timeline of each step's
// attempts, a run's event history and its spec with its params, actions
// with tasks and attempt history in Iris's state colours, the logs of any
// attempt (timestamps, ANSI colours, search, download), a form that starts
// a run of a template or of a YAML spec, workflow templates with their
// versions and params, schedules with their next times and recent runs,
// workers, the aborts of the project/domain — and stay current from the
// event streams. Every view's state (project, domain, filters, page, tab)
// is in its URL, so a copied link opens the same view; the theme (system,
// light or dark) and how times read (local, UTC, relative) are remembered
// by the browser. Every file is under /ui/, the api's only public prefix
// but for /, /healthz and /readyz. Controls (abort, suspend, resume,
// restart, approve, reject, delete, pause, unpause and trigger a schedule)
// sit behind a confirmation.
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
