package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// envVar is one environment variable a service reads: an `env:"NAME"` tag
// on a field of its configuration (caarlos0/env).
type envVar struct {
	Name string
	// Default is the envDefault tag's value, if any.
	Default string
	// HasDefault: an envDefault tag, or a doc comment on the field that
	// states its default ("Default 5s", "default unset").
	HasDefault bool
	// Required: the tag's ",required" option.
	Required bool
}

// statesDefault matches a doc comment that states a default.
var statesDefault = regexp.MustCompile(`(?i)\bdefaults?\b`)

// readEnvTags parses every non-test .go file under dirs (recursively) and
// returns the environment variables their struct tags name, by name. It
// reads the source, not a list kept beside it, so it follows a
// configuration wherever it moves (main.go, config.go, pkg/svc).
func readEnvTags(t testing.TB, dirs ...string) map[string]envVar {
	t.Helper()
	vars := map[string]envVar{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if field, ok := n.(*ast.Field); ok && field.Tag != nil {
					if v, ok := fieldEnvVar(field); ok {
						vars[v.Name] = mergeEnvVar(vars[v.Name], v)
					}
				}
				return true
			})
			return nil
		})
		require.NoErrorf(t, err, "parse the Go files under %s", dir)
	}
	return vars
}

// fieldEnvVar reads the env tag of a struct field, if it has one.
func fieldEnvVar(field *ast.Field) (envVar, bool) {
	raw, err := strconv.Unquote(field.Tag.Value)
	if err != nil {
		return envVar{}, false
	}
	tag := reflect.StructTag(raw)
	spec, ok := tag.Lookup("env")
	if !ok || spec == "" {
		return envVar{}, false
	}
	name, opts, _ := strings.Cut(spec, ",")
	def, hasDef := tag.Lookup("envDefault")
	doc := field.Doc.Text() + field.Comment.Text()
	return envVar{Name: name, Default: def, HasDefault: hasDef || statesDefault.MatchString(doc),
		Required: strings.Contains(","+opts+",", ",required,")}, true
}

// mergeEnvVar combines two fields reading one variable (two services'
// configs scanned together): a default from either counts.
func mergeEnvVar(a, b envVar) envVar {
	if a.Name == "" {
		return b
	}
	a.HasDefault = a.HasDefault || b.HasDefault
	a.Required = a.Required || b.Required
	if a.Default == "" {
		a.Default = b.Default
	}
	return a
}

// serviceEnvVars returns what each component reads: its own module's tags
// and pkg/svc's (every service embeds svc.Common). migrate is the api
// binary.
func serviceEnvVars(t testing.TB, root string) map[string]map[string]envVar {
	t.Helper()
	out := map[string]map[string]envVar{}
	for _, name := range components {
		out[name] = readEnvTags(t, filepath.Join(root, "services", name), filepath.Join(root, "pkg", "svc"))
		require.NotEmptyf(t, out[name], "services/%s reads its configuration from env tags", name)
	}
	out["migrate"] = out["api"]
	return out
}

// notUsed are variables a component reads (svc.Common carries them) but
// never uses, so a deployment does not give them: the executor never opens
// Postgres, so it gets no database credentials.
var notUsed = map[string][]string{"executor": {"CAPSTAN_DATABASE_URL"}}

// sharedVars are read by several services that must agree on their value:
// a deployment that sets one sets it alike for all of them.
var sharedVars = []string{"CAPSTAN_WORKER_GRACE", "ABORT_MAX_ATTEMPTS", "CAPSTAN_CONTROL_PLANE_KEY"}

// envProblems lists what is wrong with the environments a deployment gives
// the components (component → variable → value): a variable a component
// reads that is required, or has no default, and is not set; a CAPSTAN_ or
// ABORT_ variable no service reads (a typo); a shared variable set to
// different values; and Redis reached neither through one address nor
// through sentinels and a master.
func envProblems(reads map[string]map[string]envVar, given map[string]map[string]string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	known := map[string]bool{}
	for _, vars := range reads {
		for name := range vars {
			known[name] = true
		}
	}
	for _, comp := range sortedKeys(given) {
		env := given[comp]
		for _, name := range sortedKeys(reads[comp]) {
			v := reads[comp][name]
			if _, set := env[name]; set || isNotUsed(comp, name) {
				continue
			}
			if v.Required || !v.HasDefault {
				add("%s reads %s, which has no documented default, and it is not set", comp, name)
			}
		}
		for _, name := range sortedKeys(env) {
			if (strings.HasPrefix(name, "CAPSTAN_") || strings.HasPrefix(name, "ABORT_")) && !known[name] {
				add("%s sets %s, which no service reads", comp, name)
			}
		}
		if comp == "migrate" {
			continue
		}
		_, addr := env["CAPSTAN_REDIS_ADDR"]
		_, sentinels := env["CAPSTAN_REDIS_SENTINELS"]
		_, master := env["CAPSTAN_REDIS_MASTER"]
		if !addr && !(sentinels && master) {
			add("%s is given neither CAPSTAN_REDIS_ADDR nor CAPSTAN_REDIS_SENTINELS and CAPSTAN_REDIS_MASTER", comp)
		}
	}
	for _, name := range sharedVars {
		values := map[string][]string{}
		var readers int
		for _, comp := range sortedKeys(given) {
			if _, reads := reads[comp][name]; !reads || comp == "migrate" {
				continue
			}
			readers++
			if v, ok := given[comp][name]; ok {
				values[v] = append(values[v], comp)
			}
		}
		if len(values) > 1 || (len(values) == 1 && len(slicesOf(values)[0]) != readers) {
			add("%s must be set alike for every service that reads it: %v", name, values)
		}
	}
	return problems
}

func isNotUsed(comp, name string) bool {
	for _, n := range notUsed[comp] {
		if n == name {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func slicesOf(m map[string][]string) [][]string {
	var out [][]string
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// upEnv parses scripts/up.sh (`make up`) into the environment it gives each
// service: the variables it exports that the service reads, and those on
// the service's `start` line. $api_port is its default.
func upEnv(t testing.TB, root string, reads map[string]map[string]envVar) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "scripts", "up.sh"))
	require.NoError(t, err)
	script := string(raw)
	port := regexp.MustCompile(`api_port=\$\{CAPSTAN_API_PORT:-(\d+)\}`).FindStringSubmatch(script)
	require.NotNil(t, port, "up.sh sets api_port from CAPSTAN_API_PORT")
	script = strings.ReplaceAll(script, "$api_port", port[1])
	exported := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^export\s+(.+)$`).FindAllStringSubmatch(script, -1) {
		for _, word := range strings.Fields(m[1]) {
			name, value, _ := strings.Cut(word, "=")
			exported[name] = value
		}
	}
	out := map[string]map[string]string{}
	start := regexp.MustCompile(`(?m)^\s*start\s+\S+\s+capstan-([a-z-]+)(.*)$`)
	for _, m := range start.FindAllStringSubmatch(script, -1) {
		svc := m[1]
		env := map[string]string{}
		for name, value := range exported {
			if _, ok := reads[svc][name]; ok {
				env[name] = value
			}
		}
		for _, word := range strings.Fields(m[2]) {
			name, value, ok := strings.Cut(word, "=")
			require.Truef(t, ok, "up.sh start %s: %q is not NAME=VALUE", svc, word)
			env[name] = strings.Trim(value, `"`)
		}
		out[svc] = env
	}
	return out
}

func TestEnvTags(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	reads := serviceEnvVars(t, root)
	for _, comp := range components {
		for _, name := range []string{"CAPSTAN_DATABASE_URL", "CAPSTAN_REDIS_ADDR", "CAPSTAN_REDIS_SENTINELS", "CAPSTAN_REDIS_MASTER", "CAPSTAN_LOG_LEVEL"} {
			require.Containsf(t, reads[comp], name, "%s reads %s through svc.Common", comp, name)
		}
	}
	require.Contains(t, reads["executor"], "CAPSTAN_DRAIN_TIMEOUT")
	require.Equal(t, "60s", reads["executor"]["CAPSTAN_DRAIN_TIMEOUT"].Default)
	require.Contains(t, reads["abort-reconciler"], "ABORT_WORKERS")
	require.True(t, reads["abort-reconciler"]["ABORT_WORKERS"].HasDefault, "its doc comment states the default (cmp.Or in code)")
	require.Contains(t, reads["scheduler"], "CAPSTAN_SCHEDULER_TICK")
	require.Contains(t, reads["api"], "CAPSTAN_API_ADDR")

	up := upEnv(t, root, reads)
	require.ElementsMatch(t, components, sortedKeys(up), "up.sh starts the four services")
	require.Equal(t, "127.0.0.1:9091", up["scheduler"]["CAPSTAN_METRICS_ADDR"])
	require.Contains(t, up["executor"], "CAPSTAN_API_URL")
	require.NotContains(t, up["api"], "CAPSTAN_API_URL", "the api does not read CAPSTAN_API_URL")
}

// TestEnvChecksFail shows that envProblems catches what it is for.
func TestEnvChecksFail(t *testing.T) {
	t.Parallel()
	reads := map[string]map[string]envVar{"api": {
		"CAPSTAN_REDIS_ADDR": {Name: "CAPSTAN_REDIS_ADDR", HasDefault: true},
		"CAPSTAN_SECRET":     {Name: "CAPSTAN_SECRET"},
		"CAPSTAN_TOKEN":      {Name: "CAPSTAN_TOKEN", HasDefault: true, Required: true},
		"ABORT_MAX_ATTEMPTS": {Name: "ABORT_MAX_ATTEMPTS", HasDefault: true},
	}, "scheduler": {
		"ABORT_MAX_ATTEMPTS":      {Name: "ABORT_MAX_ATTEMPTS", HasDefault: true},
		"CAPSTAN_REDIS_SENTINELS": {Name: "CAPSTAN_REDIS_SENTINELS", HasDefault: true},
		"CAPSTAN_REDIS_MASTER":    {Name: "CAPSTAN_REDIS_MASTER", HasDefault: true},
	}}
	problems := envProblems(reads, map[string]map[string]string{
		"api":       {"CAPSTAN_REDIS_ADDR": "redis:6379", "CAPSTAN_REDIS_ADRR": "x", "ABORT_MAX_ATTEMPTS": "10"},
		"scheduler": {"CAPSTAN_REDIS_SENTINELS": "s:26379", "ABORT_MAX_ATTEMPTS": "5"},
	})
	require.ElementsMatch(t, []string{
		"api reads CAPSTAN_SECRET, which has no documented default, and it is not set",
		"api reads CAPSTAN_TOKEN, which has no documented default, and it is not set",
		"api sets CAPSTAN_REDIS_ADRR, which no service reads",
		"scheduler is given neither CAPSTAN_REDIS_ADDR nor CAPSTAN_REDIS_SENTINELS and CAPSTAN_REDIS_MASTER",
		"ABORT_MAX_ATTEMPTS must be set alike for every service that reads it: map[10:[api] 5:[scheduler]]",
	}, problems)

	field := func(src string) envVar {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package x\ntype c struct {\n"+src+"\n}\n", parser.ParseComments)
		require.NoError(t, err)
		v, ok := fieldEnvVar(f.Decls[0].(*ast.GenDecl).Specs[0].(*ast.TypeSpec).Type.(*ast.StructType).Fields.List[0])
		require.True(t, ok)
		return v
	}
	require.Equal(t, envVar{Name: "A", Default: "1s", HasDefault: true}, field("A int `env:\"A\" envDefault:\"1s\"`"))
	require.Equal(t, envVar{Name: "B", HasDefault: true}, field("// B is b. Default 5.\nB int `env:\"B\"`"))
	require.Equal(t, envVar{Name: "C"}, field("// C is c.\nC int `env:\"C\"`"))
	require.Equal(t, envVar{Name: "D", Required: true}, field("D int `env:\"D,required\"`"))
}
