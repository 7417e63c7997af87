package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command of the tree, the shell completion and help commands
// included, has an Example, and its help shows it.
func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		n++
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example", c.CommandPath())
		} else if !strings.Contains(c.UsageString(), "Examples:\n"+c.Example) {
			t.Errorf("%q: its help does not show its Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if n < 60 {
		t.Errorf("walked %d commands, want the whole tree", n)
	}
}
