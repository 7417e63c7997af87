package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

// outputsAnnotation is the cobra annotation of a command that takes more
// -o values than table, json and yaml: them, comma-separated.
const outputsAnnotation = "capstan/outputs"

// checkOutput refuses an -o value cmd does not take.
func checkOutput(cmd *cobra.Command, o string) error {
	allowed := []string{outTable, outJSON, outYAML}
	if extra := cmd.Annotations[outputsAnnotation]; extra != "" {
		allowed = append(allowed, strings.Split(extra, ",")...)
	}
	if slices.Contains(allowed, o) {
		return nil
	}
	return usagef("-o %q: %s takes %s", o, cmd.CommandPath(), strings.Join(allowed, ", "))
}

// printOut writes v to w as g's -o asks: indented JSON, YAML, or the table
// that table writes (through a tabwriter that it need not flush).
func (g *globals) printOut(w io.Writer, v any, table func(w io.Writer)) error {
	switch g.output {
	case outJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outYAML:
		raw, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(raw)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// printLine writes v as one line of JSON (-o json, for a stream of
// values), as a YAML document (-o yaml), or line as it is (table).
func (g *globals) printLine(w io.Writer, v any, line string) error {
	switch g.output {
	case outJSON, outJSONL:
		return json.NewEncoder(w).Encode(v)
	case outYAML:
		raw, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", raw)
		return err
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// printDocument writes v as -o asks, YAML for table: what a get of a
// resource that is pushed or created from a file (a template, a trigger)
// prints, in the shape of that file.
func (g *globals) printDocument(w io.Writer, v any) error {
	if g.output == outJSON {
		return g.printOut(w, v, nil)
	}
	o := *g
	o.output = outYAML
	return o.printOut(w, v, nil)
}
