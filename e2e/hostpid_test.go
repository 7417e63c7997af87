package e2e

// A pid a task records for a test to watch must be its process's pid on
// the host: a sandboxed attempt runs in a PID namespace of its own, where
// the shell's $$ and $! are the namespace's numbers. /proc is the host's,
// so /proc/self/stat, read by a process itself, starts with its host pid.

// hostPidTo is a shell statement that writes the shell's own host pid to
// file (a shell word, e.g. "$CAPSTAN_RUN_DIR/sh.pid").
func hostPidTo(file string) string {
	return `read -r p _ < /proc/self/stat; echo "$p" > ` + file
}

// bgHostPid is a shell statement that starts command (a simple command
// without quotes, e.g. "sleep 600") in the background through a shell that
// writes its host pid to file (a shell word) and then executes command,
// which keeps that pid.
func bgHostPid(command, file string) string {
	return `sh -c 'read -r p _ < /proc/self/stat; echo "$p" > "$0"; exec ` + command + `' ` + file + ` &`
}
