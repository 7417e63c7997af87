package main

import (
	"fmt"
	"io"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/buildinfo"
	"github.com/spf13/cobra"
)

// versions is what capstan version prints: the CLI's build and the
// server's (nil when it could not be read).
type versions struct {
	Client clientVersion `json:"client"`
	Server *api.Version  `json:"server"`
}

// clientVersion is the CLI's build.
type clientVersion struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildTime string `json:"build_time"`
	GoVersion string `json:"go_version"`
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the CLI's version, commit and build time, and the API server's version",
		Long: `Show the CLI's version, VCS commit and build time, and the version, commit
and Go version of the API server (GET /v1/version). When the server cannot
be read, the CLI's part is printed and the error says why (exit 3).`,
		Example: `  capstan version
  capstan version -o json | jq -r .server.version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := buildinfo.Read()
			v := versions{Client: clientVersion{Version: b.Version, Commit: b.Commit, BuildTime: b.Time, GoVersion: b.GoVersion}}
			var serr error
			v.Server, serr = serverVersion(cmd, g)
			if err := g.printOut(cmd.OutOrStdout(), v, func(w io.Writer) { printVersions(w, v) }); err != nil {
				return err
			}
			return serr
		},
	}
}

// serverVersion reads the API server's version.
func serverVersion(cmd *cobra.Command, g *globals) (*api.Version, error) {
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	resp, err := c.GetVersionWithResponse(cmd.Context())
	if err != nil {
		return nil, fmt.Errorf("read the server's version: %w", err)
	}
	if resp.JSON200 == nil {
		return nil, apiError(resp.StatusCode(), resp.Body)
	}
	return resp.JSON200, nil
}

// printVersions writes v as a table; a server not read is "unknown".
func printVersions(w io.Writer, v versions) {
	fmt.Fprintln(w, "\tVERSION\tCOMMIT\tBUILT\tGO")
	c := v.Client
	fmt.Fprintf(w, "client\t%s\t%s\t%s\t%s\n", c.Version, nonEmpty(c.Commit, "-"), nonEmpty(c.BuildTime, "-"), c.GoVersion)
	if s := v.Server; s != nil {
		fmt.Fprintf(w, "server\t%s\t%s\t%s\t%s\n", s.Version, nonEmpty(s.Commit, "-"), "-", s.GoVersion)
		return
	}
	fmt.Fprintln(w, "server\tunknown\t-\t-\t-")
}
