package e2e

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// logEvent is one server-sent event of a followed attempt.
type logEvent struct{ name, data string }

// followLogs opens logs?follow=true of attempt 1 of task 0 of step and
// sends its events to the channel until the stream ends (then closes it).
func followLogs(t *testing.T, s *Stack, run, step string) <-chan logEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	follow := true
	resp, err := s.Client.GetAttemptLogs(ctx, project, domain, run, step, 0, 1, &api.GetAttemptLogsParams{Follow: &follow})
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	ch := make(chan logEvent, 64)
	go func() {
		defer close(ch)
		var ev logEvent
		var data []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			switch {
			case sc.Text() == "":
				if ev.name != "" {
					ev.data = strings.Join(data, "\n")
					ch <- ev
				}
				ev, data = logEvent{}, nil
			case k == "event":
				ev.name = v
			case k == "data":
				data = append(data, v)
			}
		}
	}()
	return ch
}

// TestLogsFollow: the output of a step that prints a line a second shows
// while the attempt still runs, then the stream ends with the attempt.
func TestLogsFollow(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	bin := buildCLI(t)
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "tick",
		Command: ptr(`for i in 1 2 3 4 5; do echo "line $i"; sleep 1; done; echo bye >&2`)}}})
	s.Eventually(20*time.Second, "attempt 1 exists", func() bool {
		a := action(getRun(t, s, name), "tick")
		return len(a.Tasks) == 1 && len(a.Tasks[0].Attempts) == 1
	})

	cli := followCLI(t, s, bin, name, "tick")
	events := followLogs(t, s, name, "tick")
	var stdout, stderr strings.Builder
	whileRunning := "" // the output seen when a line arrived while the attempt was RUNNING
	end := ""
	for ev := range events {
		switch ev.name {
		case "stdout":
			stdout.WriteString(ev.data)
			// The first chunk may beat the RUNNING report by a tick; the
			// next line comes a second later.
			if whileRunning == "" && action(getRun(t, s, name), "tick").Tasks[0].Attempts[0].State == api.TaskStateRUNNING {
				whileRunning = stdout.String()
			}
		case "stderr":
			stderr.WriteString(ev.data)
		case "end":
			end = ev.data
		}
	}
	require.NotEmpty(t, whileRunning, "no line arrived while the attempt was RUNNING")
	require.NotContains(t, whileRunning, "line 5", "lines arrive as they are printed, not at the end")
	require.Equal(t, "line 1\nline 2\nline 3\nline 4\nline 5\n", stdout.String())
	require.Equal(t, "bye\n", stderr.String())
	require.Equal(t, "SUCCEEDED", end, "the stream ends with the attempt")

	run := waitPhase(t, s, name, 20*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, api.TaskStateSUCCEEDED, action(run, "tick").Tasks[0].Attempts[0].State)
	require.Equal(t, "line 1\nline 2\nline 3\nline 4\nline 5\n", logs(t, s, name, "tick", 0, 1), "the JSON form reads the chunks")

	stdout2, stderr2, err := cli()
	require.NoError(t, err, "capstan logs -f exits 0 at end: %s", stderr2)
	require.Equal(t, "line 1\nline 2\nline 3\nline 4\nline 5\n", stdout2, "capstan logs -f prints stdout to stdout")
	require.Equal(t, "bye\n", stderr2, "and stderr to stderr")
}

// buildCLI builds the capstan CLI and returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "capstan")
	build := exec.Command("go", "build", "-o", bin, "./cmd/capstan")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the CLI: %s", out)
	return bin
}

// followCLI starts `capstan logs -f run step`; the function it returns
// waits (at most a minute) for its exit and output.
func followCLI(t *testing.T, s *Stack, bin, run, step string) func() (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "--api", s.APIURL, "--token", s.Token, "-p", project, "-d", domain, "logs", "-f", run, step)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	return func() (string, string, error) {
		err := cmd.Wait()
		return stdout.String(), stderr.String(), err
	}
}
