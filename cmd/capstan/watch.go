package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
)

func newWatch(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Show a run's steps live (phase, elapsed time, progress) until it ends",
		Long: `Show a run's steps live from its event stream until it ends: each step's phase
and elapsed time, and a progress line such as "3/7 steps". On a terminal the
table is redrawn in place; piped, a line is printed per change. With -o json
or yaml, the run's events themselves are printed, one JSON object a line.
Exit 0 when the run SUCCEEDED, 1 when it ended in another phase.

` + exitHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return watchRun(cmd.Context(), c, g, cmd.OutOrStdout(), args[0], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}

// watchRun follows run's events until it ends, drawing its steps to out
// (or printing the events, -o json|yaml); a run that did not succeed is a
// runFailed error.
func watchRun(ctx context.Context, c *api.ClientWithResponses, g *globals, out io.Writer, run string,
	timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v := &stepView{out: out, tty: isTerminal(out), seen: map[string]api.Phase{}}
	var phase api.Phase
	var werr error
	err := followEvents(ctx, c, g, run, nil, func(ev sseEvent) bool {
		if ev.name == "end" {
			var end struct{ Phase api.Phase }
			_ = json.Unmarshal([]byte(ev.data), &end)
			phase = end.Phase
		}
		if g.output != outTable {
			if ev.name != "end" {
				werr = g.printLine(out, json.RawMessage(ev.data), "")
			}
			return werr != nil
		}
		if ev.name == "end" || time.Since(v.drawn) >= 200*time.Millisecond {
			r, err := getRun(ctx, c, g, run)
			if err != nil {
				werr = err
				return true
			}
			v.draw(r)
		}
		return false
	})
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &waitTimeout{what: fmt.Sprintf("run %s did not end in time (--timeout %s)", run, timeout)}
	case werr != nil:
		return werr
	case err != nil:
		return err
	case phase != api.PhaseSUCCEEDED:
		return &runFailed{run: run, phase: phase}
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// stepView draws a run's steps: in place on a terminal, else a line per
// change.
type stepView struct {
	out   io.Writer
	tty   bool
	lines int // drawn on the terminal last time
	drawn time.Time
	seen  map[string]api.Phase
	prog  string
}

// draw shows r.
func (v *stepView) draw(r *api.Run) {
	v.drawn = time.Now()
	steps, done := 0, 0
	var b strings.Builder
	fmt.Fprintf(&b, "run %s  %s\n", r.Name, r.Phase)
	for _, a := range r.Actions {
		if a.Name == "a0" {
			continue
		}
		steps++
		if phaseDone(a.Phase) {
			done++
		}
		line := fmt.Sprintf("  %-24s %-22s %s", a.Name, a.Phase, elapsed(a.StartedAt, a.EndedAt))
		b.WriteString(line + "\n")
		if !v.tty && v.seen[a.Name] != a.Phase {
			v.seen[a.Name] = a.Phase
			fmt.Fprintf(v.out, "%s  step %-24s %s\n", time.Now().Format("15:04:05"), a.Name, a.Phase)
		}
	}
	prog := fmt.Sprintf("%d/%d steps", done, steps)
	fmt.Fprintf(&b, "%s\n", prog)
	if !v.tty {
		if prog != v.prog {
			fmt.Fprintf(v.out, "%s  %s  (run %s)\n", time.Now().Format("15:04:05"), prog, r.Phase)
		}
		v.prog = prog
		return
	}
	if v.lines > 0 {
		fmt.Fprintf(v.out, "\x1b[%dA\x1b[J", v.lines) // back to the table's top, clear below
	}
	fmt.Fprint(v.out, b.String())
	v.lines = strings.Count(b.String(), "\n")
}

// phaseDone reports whether an action in phase p has ended.
func phaseDone(p api.Phase) bool {
	switch p {
	case api.PhaseSUCCEEDED, api.PhaseFAILED, api.PhaseABORTED, api.PhaseTIMEDOUT, api.PhaseUNSCHEDULABLE,
		api.PhaseWORKERFAILED, api.PhaseSKIPPED:
		return true
	}
	return false
}

// elapsed is the time from start to end (or now), "-" before the start.
func elapsed(start, end *time.Time) string {
	if start == nil {
		return "-"
	}
	until := time.Now()
	if end != nil {
		until = *end
	}
	return until.Sub(*start).Round(100 * time.Millisecond).String()
}
