package main

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Defaults of what neither a flag, the environment nor the current
// context sets.
const (
	defaultAPI     = "http://127.0.0.1:8080"
	defaultProject = "demo"
	defaultDomain  = "dev"
)

// cliConfig is the CLI's configuration file (configPath): named contexts,
// each an API and the scope to use it with, and the one in use.
type cliConfig struct {
	CurrentContext string                `json:"current_context,omitempty"`
	Contexts       map[string]cliContext `json:"contexts,omitempty"`
}

// cliContext is one named context. Empty fields leave the default.
type cliContext struct {
	// API is the API's base URL.
	API string `json:"api,omitempty"`
	// TokenFile is a file whose content (trimmed) is the bearer secret.
	TokenFile string `json:"token_file,omitempty"`
	Project   string `json:"project,omitempty"`
	Domain    string `json:"domain,omitempty"`
}

// configPath is $XDG_CONFIG_HOME/capstan/config.yaml, or
// ~/.config/capstan/config.yaml when XDG_CONFIG_HOME is unset.
func configPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("the configuration's directory: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "capstan", "config.yaml"), nil
}

// loadConfig reads the configuration file; a missing one is empty.
func loadConfig() (cliConfig, string, error) {
	var cfg cliConfig
	path, err := configPath()
	if err != nil {
		return cfg, "", err
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, path, nil
	}
	if err != nil {
		return cfg, path, err
	}
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return cfg, path, usagef("%s: %v", path, err)
	}
	return cfg, path, nil
}

// save writes cfg to path, readable by its owner only (0600: a context
// names a token file), through a temporary file renamed over it.
func (cfg cliConfig) save(path string) error {
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// resolve settles g's API, token, project and domain, each from the first
// that sets it: its flag, its environment variable, the context (--context,
// else the configuration's current one), the default.
func (g *globals) resolve(cmd *cobra.Command) error {
	cfg, path, err := loadConfig()
	if err != nil {
		return err
	}
	name := cmp.Or(g.context, cfg.CurrentContext)
	ctx, ok := cfg.Contexts[name]
	if name != "" && !ok {
		return usagef("context %q: not in %s (see capstan config get-contexts)", name, path)
	}
	flags := cmd.Flags()
	pick := func(flag string, cur string, env []string, fromContext, def string) string {
		if flags.Changed(flag) {
			return cur
		}
		for _, e := range env {
			if v := os.Getenv(e); v != "" {
				return v
			}
		}
		return cmp.Or(fromContext, def)
	}
	g.apiURL = pick("api", g.apiURL, []string{"CAPSTAN_API", "CAPSTAN_API_URL"}, ctx.API, defaultAPI)
	g.project = pick("project", g.project, []string{"CAPSTAN_PROJECT"}, ctx.Project, defaultProject)
	g.domain = pick("domain", g.domain, []string{"CAPSTAN_DOMAIN"}, ctx.Domain, defaultDomain)
	g.token = pick("token", g.token, []string{"CAPSTAN_TOKEN"}, "", "")
	if g.token == "" && ctx.TokenFile != "" {
		raw, err := os.ReadFile(ctx.TokenFile)
		if err != nil {
			return usagef("context %q: token_file: %v", name, err)
		}
		g.token = strings.TrimSpace(string(raw))
	}
	return nil
}

func newConfig() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage named contexts: an API, a token file, a project and a domain to use them with",
		Long: `Manage the CLI's named contexts, kept in $XDG_CONFIG_HOME/capstan/config.yaml
(~/.config/capstan/config.yaml; mode 0600). Each setting comes from the first
that gives it: its flag (--api, --token, -p, -d), its environment variable
(CAPSTAN_API, CAPSTAN_TOKEN, CAPSTAN_PROJECT, CAPSTAN_DOMAIN), the context
(--context NAME, else the current one), the default.`,
		Example: `  capstan config set-context prod --api https://capstan.example.com --token-file ~/.capstan/prod.token -p shop -d prod
  capstan config use-context prod
  capstan --context staging run list`,
		// The config commands read and write the file themselves: a context
		// that does not resolve must not stop them.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return nil },
	}
	cmd.AddCommand(newSetContext(), newUseContext(), newGetContexts(), newCurrentContext())
	return cmd
}

func newSetContext() *cobra.Command {
	var c cliContext
	cmd := &cobra.Command{
		Use:   "set-context NAME [--api URL] [--token-file FILE] [--project P] [--domain D]",
		Short: "Create a context, or change the fields given of an existing one",
		Example: `  capstan config set-context prod --api https://capstan.example.com --token-file ~/.capstan/prod.token
  capstan config set-context prod --project shop --domain prod`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			cur := cfg.Contexts[args[0]]
			cur.API, cur.TokenFile = cmp.Or(c.API, cur.API), cmp.Or(c.TokenFile, cur.TokenFile)
			cur.Project, cur.Domain = cmp.Or(c.Project, cur.Project), cmp.Or(c.Domain, cur.Domain)
			if cur.TokenFile != "" && !filepath.IsAbs(cur.TokenFile) {
				if cur.TokenFile, err = filepath.Abs(cur.TokenFile); err != nil {
					return err
				}
			}
			if cfg.Contexts == nil {
				cfg.Contexts = map[string]cliContext{}
			}
			cfg.Contexts[args[0]] = cur
			if err := cfg.save(path); err != nil {
				return fmt.Errorf("save %s: %w", path, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "context %s set in %s\n", args[0], path)
			return nil
		},
	}
	// Local flags shadow the root's --api, --project and --domain here.
	cmd.Flags().StringVar(&c.API, "api", "", "the API's base URL")
	cmd.Flags().StringVar(&c.TokenFile, "token-file", "", "a file holding the API token")
	cmd.Flags().StringVarP(&c.Project, "project", "p", "", "the project")
	cmd.Flags().StringVarP(&c.Domain, "domain", "d", "", "the domain")
	return cmd
}

func newUseContext() *cobra.Command {
	return &cobra.Command{
		Use:     "use-context NAME",
		Short:   "Make a context the current one",
		Example: `  capstan config use-context prod`,
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			cfg, _, _ := loadConfig()
			return slices.Sorted(maps.Keys(cfg.Contexts)), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			if _, ok := cfg.Contexts[args[0]]; !ok {
				return usagef("context %q: not in %s (capstan config set-context %s --api URL ...)", args[0], path, args[0])
			}
			cfg.CurrentContext = args[0]
			if err := cfg.save(path); err != nil {
				return fmt.Errorf("save %s: %w", path, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "current context: %s\n", args[0])
			return nil
		},
	}
}

func newGetContexts() *cobra.Command {
	return &cobra.Command{
		Use:     "get-contexts",
		Short:   "List the contexts; * marks the current one",
		Example: `  capstan config get-contexts`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := loadConfig()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tAPI\tPROJECT\tDOMAIN\tTOKEN FILE")
			for _, name := range slices.Sorted(maps.Keys(cfg.Contexts)) {
				c := cfg.Contexts[name]
				mark := ""
				if name == cfg.CurrentContext {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", mark, name, nonEmpty(c.API, "-"), nonEmpty(c.Project, "-"),
					nonEmpty(c.Domain, "-"), nonEmpty(c.TokenFile, "-"))
			}
			return tw.Flush()
		},
	}
}

func newCurrentContext() *cobra.Command {
	return &cobra.Command{
		Use:     "current-context",
		Short:   "Print the current context's name",
		Example: `  capstan config current-context`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			if cfg.CurrentContext == "" {
				return fmt.Errorf("no current context in %s (capstan config use-context NAME)", path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.CurrentContext)
			return nil
		},
	}
}
