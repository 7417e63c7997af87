package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// capstan token create|list|revoke: the admin routes /v1/tokens.

func newToken(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens (admin)"}
	cmd.AddCommand(newTokenCreate(g), newTokenList(g), newTokenRevoke(g))
	return cmd
}

func newTokenCreate(g *globals) *cobra.Command {
	var role api.Role
	var projects []string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a token; its secret is printed once, on stdout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := api.CreateTokenRequest{Name: args[0], Role: role}
			if len(projects) > 0 {
				body.Projects = &projects
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl must be positive, got %s", ttl)
			}
			if ttl > 0 {
				at := time.Now().Add(ttl).UTC()
				body.ExpiresAt = &at
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.CreateTokenWithResponse(cmd.Context(), body)
			if err != nil {
				return fmt.Errorf("create token %q: %w", args[0], err)
			}
			if resp.JSON201 == nil || resp.JSON201.Token == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			t := resp.JSON201
			fmt.Fprintf(os.Stderr, "token %s (%s, %s) created; its secret is shown this once:\n", t.Id, t.Name, t.Role)
			fmt.Println(*t.Token)
			return nil
		},
	}
	enumFlag(cmd, &role, roleEnum, "role", "role", api.RoleReader, "the token's role")
	cmd.Flags().StringSliceVarP(&projects, "project", "p", nil, "a project the token may reach (repeat; none: every project)")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "expire after this long, e.g. 720h (default: never)")
	return cmd
}

func newTokenList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.ListTokensWithResponse(cmd.Context())
			if err != nil {
				return fmt.Errorf("list tokens: %w", err)
			}
			if resp.JSON200 == nil {
				return apiError(resp.StatusCode(), resp.Body)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tROLE\tPROJECTS\tEXPIRES\tREVOKED")
			for _, t := range resp.JSON200.Tokens {
				projects := strings.Join(t.Projects, ",")
				if projects == "" {
					projects = "*"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Id, t.Name, t.Role, projects, when(t.ExpiresAt), when(t.RevokedAt))
			}
			return w.Flush()
		},
	}
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func newTokenRevoke(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: it is refused (401) from now on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("token id %q: not a UUID (see capstan token list)", args[0])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.RevokeTokenWithResponse(cmd.Context(), id)
			if err != nil {
				return fmt.Errorf("revoke token %s: %w", id, err)
			}
			if resp.StatusCode() != 204 {
				return apiError(resp.StatusCode(), resp.Body)
			}
			fmt.Printf("token %s revoked\n", id)
			return nil
		},
	}
}
