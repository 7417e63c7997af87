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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// scenarios are the keys in the table's order; others follow by name.
var scenarios = []string{"throughput", "diamond", "concurrency_keys", "for_each", "dispatch_latency", "e2e_latency", "abort_latency",
	"dead_worker_recovery", "scale", "api_get_run", "api_get_large_run", "accept_bulk", "event_publish", "idle_executor", "create_from_template",
	"schedules", "rate_limit", "fair_share", "sub_workflows", "sub_workflow_abort", "history", "kubernetes_throughput",
	"kubernetes_abort", "kubernetes_orphan_sweep", peakRSSKey}

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
	if s, ok := peakRSS(all); ok {
		all[peakRSSKey] = s
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

// peakRSSKey is the summary's entry that gathers every scenario's
// peak_rss_mib.
const peakRSSKey = "peak_rss"

// apiRSSTarget is the api's peak RSS target, in MiB.
const apiRSSTarget = 150.0

// peakRSS builds the peak_rss entry: for each service (executor-1 and
// executor-2 count as executor), the largest peak RSS in MiB any scenario
// reported in its figures' peak_rss_mib, and the scenario that reported
// it. ok is false when no scenario reported one. Met: the api's ≤ 150 MiB.
func peakRSS(all map[string]summary) (summary, bool) {
	peak, from := map[string]float64{}, map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(all)) {
		m, _ := all[key].Figures["peak_rss_mib"].(map[string]any)
		for proc, v := range m {
			mib, _ := v.(float64)
			svc := service(proc)
			if mib > peak[svc] {
				peak[svc], from[svc] = mib, key
			}
		}
	}
	if len(peak) == 0 {
		return summary{}, false
	}
	api, measured := peak["api"]
	var parts []string
	for _, svc := range slices.Sorted(maps.Keys(peak)) {
		parts = append(parts, fmt.Sprintf("%s %.0f MiB", svc, peak[svc]))
	}
	return summary{Title: "Peak RSS (max over scenarios)", Result: strings.Join(parts, ", "),
		Target: fmt.Sprintf("api ≤ %.0f MiB", apiRSSTarget), Met: measured && api <= apiRSSTarget,
		Figures: map[string]any{"peak_rss_mib": peak, "scenario": from,
			"source": "VmHWM of /proc/<pid>/status of each service, read at the end of each scenario before teardown"}}, true
}

// service returns the service a process name runs: the name less a "-<n>"
// replica suffix (executor-2 → executor).
func service(proc string) string {
	if i := strings.LastIndexByte(proc, '-'); i > 0 {
		if _, err := strconv.Atoi(proc[i+1:]); err == nil {
			return proc[:i]
		}
	}
	return proc
}
