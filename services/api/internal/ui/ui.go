// Package ui serves Capstan's dashboard: a static page that reads the public
// API (runs, actions, tasks with Iris state colours, attempt history, logs,
// workers, paused steps and approvals) and can abort, suspend, resume and
// restart a run and approve or reject an approval step.
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
