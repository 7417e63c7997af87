// Command benchreport gathers the scenario summaries that Capstan's
// benchmarks wrote (one <key>.json each, see scripts/bench) into one JSON
// object keyed by scenario, and prints them as a table.
//
//	go run ./e2e/benchreport -parts .data/bench/parts -out .data/bench/latest.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// scenarios are the keys in the order; others follow by name.
var scenarios = []string{"throughput", "dispatch_latency", "abort_latency", "dead_worker_recovery", "scale", "api_get_run"}

// summary is one scenario's summary as the benchmarks write it.
type summary struct {
	Title   string         `json:"title"`
	Result  string         `json:"result"`
	Target  string         `json:"target"`
	Met     bool           `json:"met"`
	Figures map[string]any `json:"figures"`
}

func main() {
	parts := flag.String("parts", ".data/bench/parts", "directory of <scenario>.json summaries")
	out := flag.String("out", ".data/bench/latest.json", "where to write the gathered summary")
	flag.Parse()
	all, err := gather(*parts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err == nil {
		err = os.WriteFile(*out, append(b, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	fmt.Print(table(all))
	fmt.Printf("\nsummary: %s\n", *out)
}

// gather reads every <key>.json in dir.
func gather(dir string) (map[string]summary, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	all := map[string]summary{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s summary
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		all[strings.TrimSuffix(filepath.Base(f), ".json")] = s
	}
	return all, nil
}

// table renders the summaries as a Markdown table, scenarios in the issue's
// order; one the run did not produce is listed as missing.
func table(all map[string]summary) string {
	keys := slices.Clone(scenarios)
	var extra []string
	for k := range all {
		if !slices.Contains(keys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	var sb strings.Builder
	sb.WriteString("| scenario | result | target | met |\n|---|---|---|---|\n")
	for _, k := range append(keys, extra...) {
		s, ok := all[k]
		if !ok {
			fmt.Fprintf(&sb, "| %s | (not run) | | |\n", k)
			continue
		}
		met := "no"
		if s.Met {
			met = "yes"
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", s.Title, s.Result, s.Target, met)
	}
	return sb.String()
}
